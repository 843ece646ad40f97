"""Start-up time against ranks on one machine: `launch --nproc_per_node=N startup_worker` (join,
Gloo mesh with neighbours at start, barrier, one all-reduce, exit) against
`torchrun --nproc_per_node=N bench/startup_ref.py` (init_process_group("gloo"), one all_reduce),
interleaved in the same run (the order alternates every repetition), medians per N.

    /usr/bin/python3 bench/startup_scale.py --ranks 2,4,8,16,32,64,128,256 --json out.json

torchrun runs up to --ref_max_ranks (default 64: every rank of the reference imports torch, about
a CPU-second each, so 256 ranks cost minutes on 2 cores); above it only ours is timed.
--baseline_build_dir adds a third series, another build of ours (e.g. before a change), timed
in the same interleaving.

Prints one table (N, medians, ratio torchrun / ours) and writes --json: a list of records
{"series": "ours" | "torchrun" | "baseline", "x": N, "seconds": S, "rep": i, "load1": L}, one per
run, for plotting ("seconds": null and "failed": why, for a run that could not start). Needs `launch` and `startup_worker` built in --build_dir and Debian's
python3-torch (/usr/bin/python3).
"""
import argparse
import json
import os
import statistics
import tempfile
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_all  # noqa: E402  (the house helpers: timed runs, command lines, load)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build_dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(run_all.REPO, "build")))
    p.add_argument("--baseline_build_dir", default="", help="another build of ours, timed as series 'baseline'")
    p.add_argument("--ranks", default="2,4,8,16,32,64,128,256")
    p.add_argument("--ref_max_ranks", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout_s", type=int, default=600, help="per run")
    p.add_argument("--work_dir", default="", help="logs (default: a new temporary folder)")
    p.add_argument("--json", default="", help="write the records here")
    args = p.parse_args()

    try:
        ranks = [int(x) for x in args.ranks.split(",") if x]
    except ValueError:
        p.error(f"--ranks must be a comma list of integers, got '{args.ranks}'")
    if not ranks or min(ranks) < 1 or args.reps < 1:
        p.error("need --ranks >= 1 and --reps >= 1")
    builds = {"ours": args.build_dir}
    if args.baseline_build_dir:
        builds["baseline"] = args.baseline_build_dir
    for series, build in builds.items():
        for prog in ("launch", "startup_worker"):
            if not os.access(os.path.join(build, "bin", prog), os.X_OK):
                p.error(f"{series}: {prog} is not built in {build}/bin")
    work = args.work_dir or tempfile.mkdtemp(prefix="startup_scale-")
    os.makedirs(work, exist_ok=True)
    sides = {s: run_all.Sides(b, work, "") for s, b in builds.items()}

    records = []
    failed = []
    for n in ranks:
        series = list(builds) + (["torchrun"] if n <= args.ref_max_ranks else [])
        for rep in range(args.reps):
            order = series if rep % 2 == 0 else list(reversed(series))
            for s in order:
                if s == "torchrun":
                    cmd = sides["ours"].torchrun(n, "startup_ref.py")
                    log = sides["ours"].log(f"ref-{n}")
                else:
                    log_dir = os.path.join(work, f"{s}-{n}-{rep}")
                    cmd = sides[s].launch(n, log_dir, "startup_worker")
                    log = sides[s].log(f"{s}-{n}")
                try:
                    wall, _ = run_all.timed(cmd, run_all.env_for(n), log, args.timeout_s)
                except run_all.RunFailed as e:
                    # A side that cannot start N ranks here is a result too (Gloo's full mesh
                    # runs out of ports at 256 ranks); the record says why, with no time.
                    why = str(e).splitlines()[-1].strip()
                    failed.append(f"{s} at {n} ranks: {why} (log {log})")
                    records.append({"series": s, "x": n, "seconds": None, "rep": rep,
                                    "load1": run_all.load1(), "failed": why})
                    print(f"# {n} ranks rep {rep + 1}/{args.reps}: {s} FAILED: {why}", flush=True)
                    continue
                records.append({"series": s, "x": n, "seconds": round(wall, 4), "rep": rep,
                                "load1": run_all.load1()})
                print(f"# {n} ranks rep {rep + 1}/{args.reps}: {s} {wall:.3f} s "
                      f"(load {run_all.load1():.2f})", flush=True)
        if args.json:  # after every N, so a long run leaves what it measured
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)

    names = list(builds) + ["torchrun"]
    print("\n| ranks | " + " | ".join(f"{s} (s)" for s in names) + " | torchrun / ours |")
    print("|---" * (len(names) + 2) + "|")
    for n in ranks:
        med = {}
        for s in names:
            xs = [r["seconds"] for r in records if r["series"] == s and r["x"] == n]
            ok = [x for x in xs if x is not None]
            med[s] = statistics.median(ok) if ok else ("failed" if xs else None)
        cells = [f"{med[s]:.2f}" if isinstance(med[s], float) else (med[s] or "-") for s in names]
        both = all(isinstance(med[s], float) for s in ("ours", "torchrun"))
        ratio = f"{med['torchrun'] / med['ours']:.1f}x" if both else "-"
        print(f"| {n} | " + " | ".join(cells) + f" | {ratio} |")
    print(f"# logs in {work}" + (f"; records in {args.json}" if args.json else ""))
    for line in failed:
        print(f"# failed: {line}")
    # Ours failing is a failure of this benchmark; a reference that cannot run is a finding.
    return 1 if any(line.startswith("ours ") for line in failed) else 0


if __name__ == "__main__":
    sys.exit(main())
