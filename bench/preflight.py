"""The pre-flight check (--preflight=on) of N simulated nodes on this machine: how long it takes
and whether it names a throttled node, with no false alarm on equal ones.

Every node is one `launch` on 127.0.0.1 (the TCP control plane on node 0) running hello_worker,
all started at once. Two cases, --runs times each, alternating:
- equal: no node throttled; the check must pass.
- throttled: node N-1's launcher (and what it starts) in a CPU cgroup with a quota of
  --quota percent of one core (cgroup v1's cpu.cfs_quota_us, or v2's cpu.max; needs root); the
  check must name it, and the job stop (a fixed --nnodes).
The check's time is what node 0's launcher prints ("pre-flight check of generation 0 (N nodes,
X s)"): from its start (listening, the exchange that is the start line) to the verdict. Also
printed: the matmul median and the throttled node's rate. Loopback nodes share a machine, so no
links are probed between them (tests/e2e/netns probes real ones between namespaces).

No reference: neither torchrun nor Paddle's launcher has a pre-flight check (DLRover's runs only
inside its Kubernetes job master). Name the CPU with the figures.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.join(REPO, "build", "bin")
sys.path.insert(0, HERE)
from detect import free_port  # noqa: E402
from machine import describe  # noqa: E402


class CpuQuota:
    """A CPU cgroup of `percent` of one core (-1: no limit); processes enter it by writing
    cgroup.procs, and set() changes the quota of all of them at once."""

    def __init__(self, percent):
        name = "ddl-bench-%d" % os.getpid()
        self.v2 = not os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        if not self.v2:
            self.dir = os.path.join("/sys/fs/cgroup/cpu", name)
            os.makedirs(self.dir, exist_ok=True)
            self._write("cpu.cfs_period_us", "100000")
        else:
            with open("/sys/fs/cgroup/cgroup.controllers") as f:
                if "cpu" not in f.read().split():
                    sys.exit("no cgroup cpu controller: cannot throttle a node")
            with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
                f.write("+cpu")
            self.dir = os.path.join("/sys/fs/cgroup", name)
            os.makedirs(self.dir, exist_ok=True)
        self.procs = os.path.join(self.dir, "cgroup.procs")
        self.set(percent)

    def set(self, percent):
        if self.v2:
            self._write("cpu.max", "%s 100000" % ("max" if percent < 0 else percent * 1000))
        else:
            self._write("cpu.cfs_quota_us", str(-1 if percent < 0 else percent * 1000))

    def _write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def close(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def run_job(nodes, quota, workdir):
    """Starts `nodes` launchers (the last one under `quota` when given); returns node 0's stderr,
    every exit code and the wall time until all exited."""
    port = free_port()
    procs = []
    env = dict(os.environ, DDL_JOB_SECRET="preflight-bench")
    for k in range(nodes):
        cmd = [os.path.join(BIN, "launch"), "--nnodes=%d" % nodes, "--node_rank=%d" % k,
               "--master_addr=127.0.0.1", "--master_port=%d" % port, "--nproc_per_node=1",
               "--preflight=on", "--print_config=false", "--quiet",
               "--log_dir", os.path.join(workdir, "n%d" % k), os.path.join(BIN, "hello_worker")]
        if quota and k == nodes - 1:
            cmd = ["/bin/sh", "-c", "echo $$ > '%s' && exec \"$0\" \"$@\"" % quota.procs] + cmd
        err = open(os.path.join(workdir, "err%d" % k), "w+")
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env), err))
    start = time.monotonic()
    codes = [p.wait(timeout=120) for p, _ in procs]
    wall = time.monotonic() - start
    for _, err in procs:
        err.seek(0)
    text0 = procs[0][1].read()
    for _, err in procs:
        err.close()
    return text0, codes, wall


LINE = re.compile(r"pre-flight check of generation 0 \((\d+) nodes, ([0-9.e-]+) s\): matmul median "
                  r"([0-9.e+-]+) GFLOP/s \(lowest ([0-9.e+-]+), node (\d+)\)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quota", type=int, default=5, help="percent of one core for the slow node")
    args = ap.parse_args()
    quota = CpuQuota(args.quota)
    results = {"equal": [], "throttled": []}
    try:
        for i in range(args.runs):
            for case in ("equal", "throttled"):
                with tempfile.TemporaryDirectory() as d:
                    text, codes, wall = run_job(args.nodes, quota if case == "throttled" else None, d)
                m = LINE.search(text)
                named = re.search(r"named node (\d+)", text)
                results[case].append({
                    "check_s": float(m.group(2)) if m else None,
                    "median_gflops": float(m.group(3)) if m else None,
                    "lowest_gflops": float(m.group(4)) if m else None,
                    "named": int(named.group(1)) if named else None,
                    "codes": codes, "wall_s": wall})
                r = results[case][-1]
                print("run %d %-9s check %s s, named %s, exit codes %s, all exited in %.2f s" %
                      (i + 1, case, r["check_s"], r["named"], codes, wall), flush=True)
    finally:
        quota.close()
    print()
    print("%s; %d loopback nodes, one launcher each, hello_worker" % (describe(), args.nodes))
    print("| case | runs | check, median (max) | named as expected | false alarms | matmul median / slow node |")
    print("|---|---:|---|---:|---:|---|")
    for case, rs in results.items():
        times = [r["check_s"] for r in rs if r["check_s"] is not None]
        if case == "equal":
            good = sum(1 for r in rs if r["named"] is None and all(c == 0 for c in r["codes"]))
            alarms = sum(1 for r in rs if r["named"] is not None)
        else:
            good = sum(1 for r in rs if r["named"] == args.nodes - 1)
            alarms = sum(1 for r in rs if r["named"] not in (None, args.nodes - 1))
        gf = [r["median_gflops"] for r in rs if r["median_gflops"]]
        low = [r["lowest_gflops"] for r in rs if r["lowest_gflops"]]
        print("| %s | %d | %s s (%s s) | %d of %d | %d | %.1f / %.1f GFLOP/s |" % (
            case if case == "equal" else "node %d at %d%% of a core" % (args.nodes - 1, args.quota),
            len(rs), "%.2f" % statistics.median(times) if times else "-",
            "%.2f" % max(times) if times else "-", good, len(rs), alarms,
            statistics.median(gf) if gf else 0, statistics.median(low) if low else 0))


if __name__ == "__main__":
    main()
