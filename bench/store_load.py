"""Store load: a rendezvous of thousands of simulated ranks on one store, ours against torch's TCPStore.

Each simulated rank connects to the store, publishes its address (set), waits for every rank
(a barrier) and reads the addresses of the peers it needs (rank-1 and rank+2^k: about 2 + log2 N
keys). Ours: bench/store_load.cpp, one TcpStoreServer process and PROCS client processes with
N/PROCS threads each (ddl::barrier, one multi_get). The reference: bench/store_load_torch.py under
Debian's /usr/bin/python3, torch.distributed.TCPStore with the same processes and threads and the
fastest pattern its version offers. Both sides run in the same invocation, alternating which goes
first; the time of one run is from the moment every client process has started (imports done,
threads made) and is told "go" until the last rank is done, so interpreter start-up is not counted.

    /usr/bin/python3 bench/store_load.py --ranks 4096,8192 --json /tmp/store_load.json

Prints one line per size with both medians and the ratio, and writes the raw runs to --json as
records {"series": "ours store" | "torch TCPStore", "x": ranks, "seconds": s, "rep": i}.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TORCH_PYTHON = "/usr/bin/python3"
SERIES = {"ours": "ours store", "torch": "torch TCPStore"}


class RunFailed(RuntimeError):
    pass


def start(cmd):
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def expect_line(proc, prefix, what, timeout_s):
    """The first stdout line of `proc`, which must start with `prefix`."""
    line = proc.stdout.readline()  # the programs print it once set up; a crash gives EOF
    if not line.startswith(prefix):
        proc.kill()
        err = proc.stderr.read()
        raise RunFailed(f"{what}: expected '{prefix}...', got {line.strip()!r}; stderr: {err.strip()[-800:]}")
    return line.split()[1:] if len(line.split()) > 1 else []


def commands(side, build_dir):
    if side == "ours":
        prog = os.path.join(build_dir, "bin", "store_load")
        return ([prog, "--serve", "--world", "{world}"],
                [prog, "--port", "{port}", "--world", "{world}", "--first", "{first}", "--count", "{count}"])
    script = os.path.join(HERE, "store_load_torch.py")
    return ([TORCH_PYTHON, script, "serve"],
            [TORCH_PYTHON, script, "clients", "{port}", "{world}", "{first}", "{count}"])


def run_once(side, world, procs, build_dir, timeout_s):
    """Seconds from "go" until the last of `world` simulated ranks is done."""
    serve_cmd, client_cmd = commands(side, build_dir)
    fmt = lambda cmd, **kw: [part.format(**kw) for part in cmd]
    server = start(fmt(serve_cmd, world=world))
    clients = []
    try:
        port = int(expect_line(server, "port", f"{side} server", timeout_s)[0])
        per = [world // procs + (1 if i < world % procs else 0) for i in range(procs)]
        first = 0
        for count in per:
            clients.append(start(fmt(client_cmd, port=port, world=world, first=first, count=count)))
            first += count
        for i, c in enumerate(clients):
            expect_line(c, "ready", f"{side} client process {i}", timeout_s)
        t0 = time.perf_counter()
        for c in clients:
            c.stdin.write("go\n")
            c.stdin.flush()
        for i, c in enumerate(clients):
            try:
                out, err = c.communicate(timeout=max(1.0, timeout_s - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                raise RunFailed(f"{side}, {world} ranks: client process {i} still running after {timeout_s} s")
            if c.returncode != 0 or not out.startswith("done"):
                raise RunFailed(f"{side}, {world} ranks: client process {i} exit {c.returncode}: "
                                f"{err.strip()[-800:]}")
        return time.perf_counter() - t0
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def write_json(path, records):
    if path:
        with open(path, "w") as f:
            json.dump(records, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="4096,8192", help="comma-separated world sizes")
    p.add_argument("--procs", type=int, default=8, help="client processes per side")
    p.add_argument("--reps", type=int, default=3, help="repetitions per size and side (median)")
    p.add_argument("--sides", default="ours,torch", help="ours, torch or both")
    p.add_argument("--timeout_s", type=float, default=600.0, help="limit for one run")
    p.add_argument("--build_dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build")))
    p.add_argument("--json", help="write the raw runs here")
    args = p.parse_args()
    sizes = [int(x) for x in args.ranks.split(",") if x]
    sides = [s for s in args.sides.split(",") if s]
    if not sizes or any(n < args.procs or n < 2 for n in sizes) or not set(sides) <= set(SERIES):
        print("store_load.py: --ranks must be sizes >= max(2, --procs); --sides of ours,torch", file=sys.stderr)
        return 2
    records = []
    print(f"# store rendezvous load: {args.procs} client processes per side, {args.reps} repetition(s)")
    for n in sizes:
        seconds = {s: [] for s in sides}
        for rep in range(args.reps):
            order = sides if rep % 2 == 0 else list(reversed(sides))
            for side in order:
                try:
                    s = run_once(side, n, args.procs, args.build_dir, args.timeout_s)
                except RunFailed as e:
                    print(f"store_load.py: {e}", file=sys.stderr)
                    write_json(args.json, records)  # what was measured before the failure
                    return 1
                seconds[side].append(s)
                records.append({"series": SERIES[side], "x": n, "seconds": s, "rep": rep})
                print(f"#   {n} ranks, {SERIES[side]}, run {rep + 1}: {s:.2f} s", flush=True)
        med = {s: statistics.median(v) for s, v in seconds.items()}
        line = f"{n:6d} ranks: " + ", ".join(f"{SERIES[s]} {med[s]:.2f} s" for s in sides)
        if "ours" in med and "torch" in med:
            line += f"; torch / ours = {med['torch'] / med['ours']:.1f}x"
        print(line, flush=True)
    write_json(args.json, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
