"""The scaling benchmark: start-up time against ranks on one machine, against simulated
nodes, and the store's rendezvous load against simulated ranks, ours and the reference measured in
the same run, drawn as SVG curves (bench/svg_plot.py) for docs/PERFORMANCE.md.

    /usr/bin/python3 bench/scale.py                      everything (about 20 minutes on 2 cores)
    /usr/bin/python3 bench/scale.py --only ranks --ranks 2,4,8,16
    /usr/bin/python3 bench/scale.py --quick              small sizes, one repetition
    /usr/bin/python3 bench/scale.py --before_build /tmp/old/build   adds an earlier build's curve

Parts (--only, comma list), each its own script that writes {"series", "x", "seconds"} records:
  ranks  bench/startup_scale.py: `launch --nproc_per_node=N startup_worker` (rendezvous, Gloo
         connections, a barrier, one all-reduce, exit) against `torchrun --nproc_per_node=N
         bench/startup_ref.py` (init_process_group("gloo") + one all-reduce), N = 2..256; torchrun
         up to --torch_max_ranks (each of its ranks imports torch: about a CPU-second and 230 MB).
  nodes  bench/scale_nodes.py: one launcher per loopback address against torchrun's c10d agents.
  store  bench/store_load.py: thousands of simulated ranks doing the rendezvous pattern against our
         store and torch's TCPStore.
Prints each part's table with the ratios, writes every record to --out/scale.json and the curves
(medians) to --svg_dir (default docs/scaling), which docs/PERFORMANCE.md shows.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import run_all  # noqa: E402  (the house helpers: versions)
from machine import describe  # noqa: E402
import svg_plot  # noqa: E402

TORCH_PYTHON = run_all.TORCH_PYTHON


def run_part_script(script, args, out_json, log_path):
    """Runs a part's own benchmark script, which writes its records as JSON to `out_json`."""
    cmd = [TORCH_PYTHON, os.path.join(HERE, script), *args, "--json", out_json]
    print("# " + " ".join(cmd), flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.write(proc.stdout)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise run_all.RunFailed(f"{script}: exit code {proc.returncode} (log {log_path})")
    with open(out_json) as f:
        data = json.load(f)
    return medians(data["records"] if isinstance(data, dict) else data)


def medians(records):
    """One record per (series, x): the median of its repetitions."""
    runs = {}
    for r in records:
        if r.get("seconds"):
            runs.setdefault((r["series"], r["x"]), []).append(r["seconds"])
    return [{"series": s, "x": x, "seconds": statistics.median(v), "runs": len(v)}
            for (s, x), v in runs.items()]


# Legend names for the series each part script writes.
SERIES_NAMES = {
    "ours": "ours: launch + startup_worker",
    "baseline": "ours, earlier build (--before_build)",
    "torchrun": "torchrun + init_process_group(gloo)",
    "ours nodes": "ours: one launch per node",
    "ours nodes (before)": "ours, earlier build (--before_build)",
    "torchrun c10d": "torchrun c10d agents",
    "ours store": "ours: TcpStore",
    "torch TCPStore": "torch TCPStore",
}


def named(records):
    return [dict(r, series=SERIES_NAMES.get(r["series"], r["series"])) for r in records]


def ratio_rows(records, ours, ref):
    """Markdown rows: x, ours, reference, reference / ours (medians)."""
    by = {}
    for r in records:
        by.setdefault(r["x"], {})[r["series"]] = r["seconds"]
    rows = []
    for x in sorted(by):
        o, f = by[x].get(ours), by[x].get(ref)
        rows.append(f"| {x:,} | {o:.2f} s | " + (f"{f:.2f} s | {f / o:.1f}x |" if f and o else "- | - |"))
    return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="ranks,nodes,store")
    p.add_argument("--ranks", default="2,4,8,16,32,64,128,256")
    p.add_argument("--torch_max_ranks", type=int, default=32,
                   help="largest torchrun job in the ranks part (a torch rank costs ~1 CPU-second)")
    p.add_argument("--nodes", default="2,4,8,16,32,64,128,256")
    p.add_argument("--torch_max_nodes", type=int, default=32)
    p.add_argument("--store_ranks", default="4096,8192")
    p.add_argument("--reps", type=int, default=2, help="repetitions per size and side (median)")
    p.add_argument("--before_build", default="",
                   help="a build of an earlier commit, timed as a third series (ranks and nodes)")
    p.add_argument("--quick", action="store_true", help="sizes up to 16 (store: 1,024), one repetition")
    p.add_argument("--build_dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build")))
    p.add_argument("--out", default=None, help="folder for logs and scale.json (default: a temp folder)")
    p.add_argument("--svg_dir", default=os.path.join(REPO, "docs", "scaling"))
    args = p.parse_args()
    only = set(args.only.split(","))
    if args.quick:
        keep = lambda text, top: ",".join(x for x in text.split(",") if int(x) <= top)  # noqa: E731
        args.ranks, args.nodes, args.store_ranks = keep(args.ranks, 16), keep(args.nodes, 16), "1024"
        args.reps = 1
    work = args.out or tempfile.mkdtemp(prefix="ddl-scale-")
    os.makedirs(work, exist_ok=True)
    os.makedirs(args.svg_dir, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = describe()
    result = {"when": when, "machine": machine, "versions": run_all.versions()}
    print(f"# scale benchmark, {when}, {machine}; logs in {work}", flush=True)
    subtitle = f"{machine}; {when}; medians of {args.reps}; every series in the same run"

    # Each part: its script and arguments, its picture, and the two series its table compares.
    parts = {
        "ranks": ("startup_scale.py",
                  ["--ranks", args.ranks, "--reps", str(args.reps), "--build_dir", args.build_dir,
                   "--ref_max_ranks", str(args.torch_max_ranks),
                   *(["--baseline_build_dir", args.before_build] if args.before_build else [])],
                  "startup_ranks.svg", "Start-up against ranks on one machine (launch to every rank exited)",
                  "ranks (processes on one machine, log scale)", (128, 2.0, "goal: 128 ranks in 2 s"),
                  ("ours", "torchrun")),
        "nodes": ("scale_nodes.py",
                  ["--nodes", args.nodes, "--repeat", str(args.reps), "--build", args.build_dir,
                   "--torch_max_nodes", str(args.torch_max_nodes),
                   *(["--before_build", args.before_build] if args.before_build else [])],
                  "startup_nodes.svg", "Start-up against simulated nodes (one launcher per loopback address)",
                  "nodes (log scale)", (256, 10.0, "goal: 256 nodes in 10 s"),
                  ("ours nodes", "torchrun c10d")),
        "store": ("store_load.py",
                  ["--ranks", args.store_ranks, "--reps", str(args.reps), "--procs", "16",
                   "--build_dir", args.build_dir],
                  "store_rendezvous.svg", "Store rendezvous against simulated ranks (publish, barrier, read peers)",
                  "simulated ranks (log scale)", (4096, 5.0, "goal: 4,096 ranks in 5 s"),
                  ("ours store", "torch TCPStore")),
    }
    for part, (script, script_args, svg, title, x_label, goal, (ours, ref)) in parts.items():
        if part not in only:
            continue
        records = named(run_part_script(script, script_args, os.path.join(work, f"{part}.json"),
                                        os.path.join(work, f"{part}.log")))
        result[part] = records
        svg_plot.write(os.path.join(args.svg_dir, svg), records, title, x_label, subtitle=subtitle, goal=goal)
        print(ratio_rows(records, SERIES_NAMES[ours], SERIES_NAMES[ref]))
    with open(os.path.join(work, "scale.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"# records: {os.path.join(work, 'scale.json')}; curves: {args.svg_dir}", flush=True)


if __name__ == "__main__":
    main()
