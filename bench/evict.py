"""--straggler=evict on a real job: an elastic 3-node data-parallel MNIST job on this machine
(one `launch` per node on 127.0.0.1, one train_mnist rank each, Gloo), node 2's launcher in a CPU
cgroup. Once rank 0 has trained --throttle_at batches, node 2's cgroup gets --quota percent of one
core: every rank of the synchronous job waits for it at each all-reduce. Node 0 names node 2 a
straggler from the paces the heartbeats carry, evicts it, and the job restarts on nodes 0 and 1
from its last checkpoint.

From the arrival times of rank 0's "epoch: E, batch: B" lines (read as they are written), the job's
images/s (batches x batch size x world size per second) in three phases:
- healthy: generation 0 before the throttle (its first 50 batches skipped);
- dragged: generation 0 from 0.3 s after the throttle to the eviction;
- after: generation 1 (its first 30 batches skipped);
and the time from the throttle to node 0's eviction line. The goal: after >= 1.5x dragged.

No reference run: torchrun has no straggler detection, so a torchrun + DDP job stays at the
dragged rate until it ends (the dragged phase is what it would run at). Needs root (the cgroup),
build/ (launch, train_mnist) and data/mnist. Name the CPU with the figures.
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
DATA = os.path.join(REPO, "data", "mnist")
sys.path.insert(0, HERE)
from detect import free_port  # noqa: E402
from machine import describe  # noqa: E402
from preflight import CpuQuota  # noqa: E402

BATCH = 100
IMAGES = 60000
LOG_INTERVAL = 2  # rank 0 prints every this many batches


def run_once(args, quota, workdir):
    port = free_port()
    env = dict(os.environ, DDL_JOB_SECRET="evict-bench")
    env.pop("OMP_NUM_THREADS", None)
    procs = []
    for k in range(3):
        cmd = [os.path.join(BIN, "launch"), "--nnodes=2:3", "--node_rank=%d" % k,
               "--master_addr=127.0.0.1", "--master_port=%d" % port, "--nproc_per_node=1",
               "--max_restarts=1", "--straggler=evict", "--print_config=false", "--quiet",
               "--log_dir", os.path.join(workdir, "n%d" % k),
               os.path.join(BIN, "train_mnist"), "--data_dir", DATA, "--epochs", "20",
               "--max_steps", str(args.steps), "--batch_size", str(BATCH), "--log_interval", str(LOG_INTERVAL),
               "--threads", "1", "--seed", "7", "--save", os.path.join(workdir, "ck"),
               "--save_every", "50"]
        if k == 2:
            cmd = ["/bin/sh", "-c", "echo $$ > '%s' && exec \"$0\" \"$@\"" % quota.procs] + cmd
        err = open(os.path.join(workdir, "err%d" % k), "w+")
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env), err))
    log = os.path.join(workdir, "n0", "workerlog.0")
    points = []  # (time, generation, epoch, batch)
    generation = 0
    throttled_at = evicted_at = None
    offset = 0
    line_re = re.compile(r"epoch: (\d+), batch: (\d+), loss is")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if os.path.exists(log):
            with open(log) as f:
                f.seek(offset)
                chunk = f.read()
            # Whole lines only.
            cut = chunk.rfind("\n") + 1
            offset += len(chunk[:cut].encode())
            now = time.monotonic()
            for line in chunk[:cut].splitlines():
                if line.startswith("==== restart"):
                    generation += 1
                m = line_re.search(line)
                if m:
                    points.append((now, generation, int(m.group(1)), int(m.group(2))))
        if throttled_at is None and points and points[-1][1] == 0 and \
                len([p for p in points if p[1] == 0]) * LOG_INTERVAL >= args.throttle_at:
            quota.set(args.quota)
            throttled_at = time.monotonic()
        if evicted_at is None:
            procs[0][1].seek(0)
            if "evicting node 2" in procs[0][1].read():
                evicted_at = time.monotonic()
        if all(p.poll() is not None for p, _ in procs):
            break
        time.sleep(0.02)
    for p, _ in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    codes = [p.returncode for p, _ in procs]
    for _, e in procs:
        e.close()
    quota.set(-1)
    return points, throttled_at, evicted_at, codes


def rate(points, world, start, end, skip):
    """Images/s over the points of one generation with start <= time < end, after `skip`
    batches."""
    per_epoch = -(-IMAGES // (world * BATCH))
    sel = [p for p in points if start <= p[0] < end][skip // LOG_INTERVAL:]
    if len(sel) < 3:
        return None
    batches = 0
    for a, b in zip(sel, sel[1:]):
        batches += (b[3] - a[3]) if b[2] == a[2] else (per_epoch - a[3] + b[3])
    return batches * BATCH * world / (sel[-1][0] - sel[0][0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--throttle_at", type=int, default=300, help="rank 0's batches before")
    ap.add_argument("--quota", type=int, default=20, help="percent of one core for node 2")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    quota = CpuQuota(-1)
    rows = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                points, t_throttle, t_evict, codes = run_once(args, quota, d)
            g0 = [p for p in points if p[1] == 0]
            g1 = [p for p in points if p[1] == 1]
            healthy = rate(g0, 3, 0, t_throttle or float("inf"), 50)
            dragged = rate(g0, 3, (t_throttle or 0) + 0.3, t_evict or float("inf"), 0)
            after = rate(g1, 2, 0, float("inf"), 30)
            detect = t_evict - t_throttle if t_evict and t_throttle else None
            rows.append((healthy, dragged, after, detect, codes))
            print("run %d: healthy %s, dragged %s, after eviction %s images/s; evicted %s s after "
                  "the throttle; exit codes %s" % (
                      i + 1, "%.0f" % healthy if healthy else "-",
                      "%.0f" % dragged if dragged else "-", "%.0f" % after if after else "-",
                      "%.2f" % detect if detect else "-", codes), flush=True)
    finally:
        quota.close()
    print()
    print("%s; 3 loopback nodes x 1 train_mnist rank (Gloo, 1 thread), batch %d, "
          "node 2 cut to %d%% of a core after %d batches" % (describe(), BATCH, args.quota,
                                                           args.throttle_at))

    def med(i):
        v = [r[i] for r in rows if r[i]]
        return statistics.median(v) if v else None

    h, dr, af, de = med(0), med(1), med(2), med(3)
    print("| phase | images/s (median of %d) |" % len(rows))
    print("|---|---:|")
    print("| healthy, 3 nodes | %s |" % ("%.0f" % h if h else "-"))
    print("| dragged by node 2 (torchrun + DDP stays here) | %s |" % ("%.0f" % dr if dr else "-"))
    print("| after eviction, 2 nodes | %s |" % ("%.0f" % af if af else "-"))
    if dr and af:
        print("after / dragged: %.2fx (goal >= 1.5x); throttle to eviction: %s s" %
              (af / dr, "%.2f" % de if de else "-"))


if __name__ == "__main__":
    main()
