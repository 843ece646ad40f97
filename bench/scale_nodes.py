"""Start-up against simulated nodes: one launcher per loopback address, one worker each.

For every node count K it starts K `launch` processes (node i on its own loopback address,
127.0.0.1 for node 0, `--nnodes=K --node_rank=i --master_addr=127.0.0.1`, `--nproc_per_node=1`),
joined through node 0's control store, and times from the first start to the last exit (every
launcher must exit 0). The reference, in the same run: K torchrun agents with the c10d
rendezvous (`--rdzv_backend=c10d --nnodes=K --nproc_per_node=1`, through bench/torchrun_py311.py,
the one-line fix that lets Debian's torch 1.13 run on Python 3.11; torch 1.13 has no
--local_addr, so its agents all name this host). Both sides run the same trivial worker,
`hello_worker` (it reads its place in the job, prints it and exits; torchrun starts it with
--no_python), so what is timed is the launchers' own join, start, watch and finish.

Each torchrun agent is a Python process that imports torch (~150 MB, ~1-2 s of CPU): the
reference is capped at --torch_max_nodes and by the memory this machine has; the reason is
printed for each size it skips. With --before_build an earlier build of ours is timed as well.

Prints one line per size (ours, before, torchrun, torchrun / ours) and writes the raw numbers to
--json as records {"series": "ours nodes" | "ours nodes (before)" | "torchrun c10d",
"x": nodes, "seconds": s, "run": i}.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TORCH_PYTHON = "/usr/bin/python3"
SECRET = "scale-nodes-bench-secret"
TORCH_AGENT_MB = 250  # what one torchrun agent and its worker hold, with margin


class RunFailed(RuntimeError):
    pass


def node_address(i):
    """Node i's loopback address: 127.0.0.1 for node 0, then .2 ... .254, 127.0.1.1 ..."""
    return f"127.0.{i // 254}.{i % 254 + 1}"


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_pair():
    """Two consecutive free ports on 127.0.0.1 (the launcher's control store takes the second),
    above Linux's ephemeral range: hundreds of launchers retrying their connects before node 0
    binds would otherwise take ephemeral ports of 127.0.0.1 by the hundred, the port itself
    among them now and then."""
    start = 61000 + (os.getpid() % 500) * 8
    for port in list(range(start, 64990, 2)) + list(range(61000, start, 2)):
        if bindable(port) and bindable(port + 1):
            return port
    raise RunFailed("no two consecutive free ports in 61000..64990 on 127.0.0.1")


def available_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def run_nodes(commands, env, workdir, timeout_s):
    """Starts every command (stdout+stderr to a file each), waits for all; returns wall seconds.
    Kills what is left and raises RunFailed on a non-zero exit or the timeout."""
    procs = []
    start = time.perf_counter()
    try:
        for i, cmd in enumerate(commands):
            log = open(os.path.join(workdir, f"node{i}.log"), "w")
            procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=workdir, start_new_session=True), log))
        deadline = start + timeout_s
        for i, (p, _) in enumerate(procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                raise RunFailed(f"node {i} did not exit within {timeout_s} s (logs in {workdir})")
        wall = time.perf_counter() - start
        bad = [(i, p.returncode) for i, (p, _) in enumerate(procs) if p.returncode != 0]
        if bad:
            i, code = bad[0]
            with open(os.path.join(workdir, f"node{i}.log"), errors="replace") as f:
                tail = "\n".join(f.read().splitlines()[-10:])
            raise RunFailed(f"{len(bad)} node(s) exited non-zero, first node {i} with {code} "
                            f"(logs in {workdir}):\n{tail}")
        return wall
    finally:
        for p, log in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait()
            log.close()


def ours_commands(build, nodes, port):
    launch = os.path.join(build, "bin", "launch")
    worker = os.path.join(build, "bin", "hello_worker")
    return [[launch, f"--nnodes={nodes}", f"--node_rank={i}", "--master_addr=127.0.0.1",
             f"--master_port={port}", f"--node_ip={node_address(i)}", "--nproc_per_node=1",
             "--print_config=false", "--rendezvous_timeout=120", worker]
            for i in range(nodes)]


def torch_commands(build, nodes, port):
    worker = os.path.join(build, "bin", "hello_worker")
    return [[TORCH_PYTHON, os.path.join(HERE, "torchrun_py311.py"), "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", f"--nnodes={nodes}", "--nproc_per_node=1",
             "--monitor_interval=0.1", "--max_restarts=0",
             "--rdzv_conf=join_timeout=600", "--no_python", worker]
            for i in range(nodes)]


def measure(series, make, build, nodes, repeat, env, timeout_s, keep):
    times = []
    for r in range(repeat):
        workdir = tempfile.mkdtemp(prefix=f"ddl-scale-nodes-{nodes}-")
        try:
            times.append(run_nodes(make(build, nodes, free_port_pair()), env, workdir, timeout_s))
        finally:
            if not keep:
                shutil.rmtree(workdir, ignore_errors=True)
        print(f"#   {series} {nodes} nodes, run {r + 1}/{repeat}: {times[-1]:.2f} s", flush=True)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the build folder")
    ap.add_argument("--nodes", default="2,4,8,16,32,64,128,256",
                    help="comma-separated node counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size and side (median)")
    ap.add_argument("--torch_max_nodes", type=int, default=32,
                    help="largest node count run under torchrun (each agent imports torch)")
    ap.add_argument("--no_torch", action="store_true", help="ours only")
    ap.add_argument("--before_build",
                    help="also time this build (e.g. of an earlier commit), series 'ours nodes "
                         "(before)'")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--keep_logs", action="store_true", help="keep each run's logs")
    args = ap.parse_args()

    args.build = os.path.abspath(args.build)
    sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    if any(n < 2 or n > 254 * 254 for n in sizes):
        sys.exit("scale_nodes: every node count must be 2 or more")
    if args.before_build:
        args.before_build = os.path.abspath(args.before_build)
    for build in filter(None, (args.build, args.before_build)):
        for program in ("launch", "hello_worker"):
            if not os.access(os.path.join(build, "bin", program), os.X_OK):
                sys.exit(f"scale_nodes: {build}/bin/{program} is missing: build it first")
    env = dict(os.environ, DDL_JOB_SECRET=SECRET, OMP_NUM_THREADS="1")
    env.pop("DDL_JOB_ID", None)
    torch_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")

    records = []
    print(f"# simulated nodes: one launcher per loopback address, 1 worker each; median of "
          f"{args.repeat} run(s)", flush=True)
    print(f"{'nodes':>6} {'ours s':>9} {'before s':>9} {'torchrun s':>11} {'torchrun/ours':>14}",
          flush=True)
    for nodes in sizes:
        ours = measure("ours", ours_commands, args.build, nodes, args.repeat, env, args.timeout,
                       args.keep_logs)
        ours_s = statistics.median(ours)
        records += [{"series": "ours nodes", "x": nodes, "seconds": s, "run": i}
                    for i, s in enumerate(ours)]
        before_text = f"{'-':>9}"
        if args.before_build:
            before = measure("before", ours_commands, args.before_build, nodes, args.repeat, env,
                             args.timeout, args.keep_logs)
            before_text = f"{statistics.median(before):9.2f}"
            records += [{"series": "ours nodes (before)", "x": nodes, "seconds": s, "run": i}
                        for i, s in enumerate(before)]
        torch_s = None
        why = ""
        if args.no_torch:
            why = "--no_torch"
        elif nodes > args.torch_max_nodes:
            why = f"above --torch_max_nodes={args.torch_max_nodes} (each agent imports torch)"
        elif nodes * TORCH_AGENT_MB > available_mb():
            why = (f"{nodes} agents need ~{nodes * TORCH_AGENT_MB} MB, {available_mb()} MB "
                   f"available")
        else:
            ref = measure("torchrun", torch_commands, args.build, nodes, args.repeat, torch_env,
                          args.timeout, args.keep_logs)
            torch_s = statistics.median(ref)
            records += [{"series": "torchrun c10d", "x": nodes, "seconds": s, "run": i}
                        for i, s in enumerate(ref)]
        ref_text = f"{torch_s:11.2f} {torch_s / ours_s:13.1f}x" if torch_s else \
            f"{'-':>11} {'-':>14}  (torchrun not run: {why})"
        print(f"{nodes:6d} {ours_s:9.2f} {before_text} {ref_text}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
        print(f"# wrote {len(records)} records to {args.json}")


if __name__ == "__main__":
    try:
        main()
    except RunFailed as e:
        sys.exit(f"scale_nodes: {e}")
