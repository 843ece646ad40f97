"""The scaling benchmark of issue 29: start-up time against ranks on one machine, against simulated
nodes, and the store's rendezvous load against simulated ranks, ours and the reference measured in
the same run, drawn as SVG curves (bench/svg_plot.py) for docs/PERFORMANCE.md.

    /usr/bin/python3 bench/scale.py                      everything (about 10-20 minutes on 2 cores)
    /usr/bin/python3 bench/scale.py --only ranks --ranks 2,4,8,16
    /usr/bin/python3 bench/scale.py --quick              small sizes, one repetition

Parts (--only, comma list):
  ranks  `launch --nproc_per_node=N startup_worker` (rendezvous, Gloo connections, a barrier, one
         all-reduce, exit) against `torchrun --nproc_per_node=N bench/startup_ref.py`
         (init_process_group("gloo") + one all-reduce) for N = 2..256. Torch runs only up to the
         size the machine's memory holds (each rank is a Python process that imports torch: the
         cap is measured, and printed).
  nodes  bench/scale_nodes.py: one launcher per loopback address against torchrun's c10d agents.
  store  bench/store_load.py: thousands of simulated ranks doing the rendezvous pattern against our
         store and torch's TCPStore.
Writes every record to --out/scale.json and the curves to --svg_dir (default docs/scaling).
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

import run_all  # noqa: E402  (the house helpers: timed, Sides, versions, load1)
import svg_plot  # noqa: E402

TORCH_PYTHON = run_all.TORCH_PYTHON


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def torch_rank_bytes():
    """Peak resident size of one Python process that imported torch and made a tensor."""
    out = subprocess.run(
        [TORCH_PYTHON, "-c",
         "import resource, torch; torch.ones(4); "
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"],
        capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip())


def bench_ranks(sides, ranks, reps, torch_cap):
    records, rows = [], []
    for n in ranks:
        ours, ref = [], []
        for rep in range(reps):
            order = ("ours", "ref") if rep % 2 == 0 else ("ref", "ours")
            for side in order:
                if side == "ours":
                    log_dir = os.path.join(sides.work, f"ranks-ours-{n}-{rep}")
                    cmd = sides.launch(n, log_dir, os.path.join(sides.bin, "startup_worker"))
                    wall, _ = run_all.timed(cmd, run_all.env_for(n), sides.log(f"ranks-ours-{n}"), 600)
                    ours.append(wall)
                elif n <= torch_cap and (rep == 0 or n <= 16):
                    # Above 16 ranks one torch run takes 20 s to minutes here: run it once.
                    cmd = sides.torchrun(n, "startup_ref.py")
                    wall, _ = run_all.timed(cmd, run_all.env_for(n), sides.log(f"ranks-ref-{n}"), 600)
                    ref.append(wall)
            shown = f", torchrun {ref[-1]:.3f} s" if ref else " (torch not run at this size)"
            print(f"# start-up {n} ranks, rep {rep + 1}/{reps}: ours {ours[-1]:.3f} s{shown} "
                  f"(load {run_all.load1():.2f})", flush=True)
        row = {"ranks": n, "ours_s": statistics.median(ours), "ours_all": ours}
        records.append({"series": "ours: launch + startup_worker", "x": n, "seconds": row["ours_s"]})
        if ref:
            row.update(ref_s=statistics.median(ref), ref_all=ref)
            records.append({"series": "torchrun + init_process_group(gloo)", "x": n,
                            "seconds": row["ref_s"]})
        rows.append(row)
    return rows, records


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


def ratio_table(records, ours_series, ref_series, x_name):
    by = {}
    for r in records:
        by.setdefault(r["x"], {})[r["series"]] = r["seconds"]
    lines = [f"| {x_name} | ours (s) | reference (s) | reference / ours |", "|---:|---:|---:|---:|"]
    for x in sorted(by):
        o, ref = by[x].get(ours_series), by[x].get(ref_series)
        ratio = f"{ref / o:.1f}x" if o and ref else "-"
        lines.append(f"| {x:,} | {o:.3f} | {ref:.3f} | {ratio} |" if ref else
                     f"| {x:,} | {o:.3f} | (not run) | - |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="ranks,nodes,store")
    p.add_argument("--ranks", default="2,4,8,16,32,64,128,256")
    p.add_argument("--nodes", default="2,4,8,16,32,64,128,256")
    p.add_argument("--store_ranks", default="1024,4096,8192")
    p.add_argument("--reps", type=int, default=3, help="repetitions per size up to 64 ranks")
    p.add_argument("--big_reps", type=int, default=1, help="repetitions per size above 64 ranks")
    p.add_argument("--quick", action="store_true", help="sizes up to 16, one repetition")
    p.add_argument("--build_dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build")))
    p.add_argument("--out", default=None, help="folder for logs and scale.json (default: a temp folder)")
    p.add_argument("--svg_dir", default=os.path.join(REPO, "docs", "scaling"))
    args = p.parse_args()
    only = set(args.only.split(","))
    ranks = [int(x) for x in args.ranks.split(",")]
    nodes = [int(x) for x in args.nodes.split(",")]
    store_ranks = [int(x) for x in args.store_ranks.split(",")]
    if args.quick:
        ranks = [x for x in ranks if x <= 16]
        nodes = [x for x in nodes if x <= 16]
        store_ranks = [x for x in store_ranks if x <= 1024]
        args.reps = args.big_reps = 1
    work = args.out or tempfile.mkdtemp(prefix="ddl-scale-")
    os.makedirs(work, exist_ok=True)
    os.makedirs(args.svg_dir, exist_ok=True)
    sides = run_all.Sides(args.build_dir, work, None)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = f"{os.cpu_count()} cores, {run_all.cpu_model()}"
    result = {"when": when, "machine": machine, "versions": run_all.versions()}
    print(f"# scale benchmark, {when}, {machine}; logs in {work}", flush=True)
    subtitle = f"{machine}; {when}; ours and the reference in the same run"

    if "ranks" in only:
        per_rank = torch_rank_bytes()
        torch_cap = int(0.6 * mem_available_bytes() / per_rank)
        print(f"# one torch rank takes {per_rank / 2**20:.0f} MiB: torch runs up to {torch_cap} ranks "
              f"(60% of the available memory)", flush=True)
        rows, records = [], []
        for n in ranks:
            r, rec = bench_ranks(sides, [n], args.reps if n <= 64 else args.big_reps, torch_cap)
            rows += r
            records += rec
        result["ranks"] = {"rows": rows, "records": records, "torch_cap": torch_cap}
        svg_plot.write(os.path.join(args.svg_dir, "startup_ranks.svg"), records,
                       "Start-up against ranks on one machine (launch to every rank exited)",
                       "ranks (processes on one machine, log scale)", subtitle=subtitle,
                       goal=(128, 2.0, "goal: 128 ranks <= 2 s"))
        print(ratio_table(records, "ours: launch + startup_worker", "torchrun + init_process_group(gloo)",
                          "ranks"))
    if "nodes" in only:
        records = run_part_script("scale_nodes.py", ["--nodes", ",".join(map(str, nodes)),
                                                      "--build_dir", args.build_dir],
                                  os.path.join(work, "nodes.json"), os.path.join(work, "nodes.log"))
        result["nodes"] = {"records": records}
        svg_plot.write(os.path.join(args.svg_dir, "startup_nodes.svg"), records,
                       "Start-up against simulated nodes (one launcher per loopback address)",
                       "nodes (log scale)", subtitle=subtitle, goal=(256, 10.0, "goal: 256 nodes <= 10 s"))
    if "store" in only:
        records = run_part_script("store_load.py", ["--ranks", ",".join(map(str, store_ranks)),
                                                     "--build_dir", args.build_dir],
                                  os.path.join(work, "store.json"), os.path.join(work, "store.log"))
        result["store"] = {"records": records}
        svg_plot.write(os.path.join(args.svg_dir, "store_rendezvous.svg"), records,
                       "Store rendezvous against simulated ranks (publish, wait for all, read peers)",
                       "simulated ranks (log scale)", subtitle=subtitle,
                       goal=(4096, 5.0, "goal: 4,096 ranks <= 5 s"))
    with open(os.path.join(work, "scale.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"# records: {os.path.join(work, 'scale.json')}; curves: {args.svg_dir}", flush=True)


if __name__ == "__main__":
    main()
