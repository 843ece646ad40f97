"""How fast a sick rank is found: ours (the steps workers report on DDL_PROGRESS_FD) against the
fixed hang timeout and against torchrun, on a 2-rank data-parallel MNIST job, with real faults.

Faults (each timed from the moment it is made to the line that names it):
- stop: rank 1 is SIGSTOPped mid-training; rank 0 then blocks in its next all-reduce.
  - ours, step timeout: `launch --step_timeout_floor F` (the default factor, 4), once with F = 0
    (the pace rule alone) and once with F = --floor (default 0.5 s; train_mnist's steps take
    ~20 ms here, so the default floor of 10 s would be what is measured); the line waited for is
    `step timeout:` on the launcher's stderr. Also printed: the job's pace (from that line) and the
    detection time in paces.
  - fixed timeout: the same job with `--step_timeout_factor 0 --hang_timeout H` (H, --hang,
    default 10 s: train_mnist prints a line every --log_interval 100 steps, a few seconds apart,
    and evaluates for a while at each epoch's end, so a fixed timeout must be well above that);
    the line is `hang guard:`.
  - torchrun + DDP (bench/ref_train_ddp.py through bench/torchrun_py311.py, --monitor_interval
    0.1): torchrun has no detector; Gloo's own timeout is 30 minutes. Watched for --cap seconds
    (default 30) for any sign (the agent's "failed" / a worker exiting); reported as "not within".
- slow: from a given step on, rank 1 shares its core with a busy loop (`--bind=core` puts rank 0
  on CPU 0 and rank 1 on CPU 1; the loop is pinned to CPU 1), halving its compute. Ours: steps
  from the loop's start (rank 1's last `batch: B` line, --log_interval 1) to the `straggler: rank
  1` line's "at step N". Neither the fixed timeout (the job is slow, not silent) nor torchrun
  names it.
- overhead: train_mnist's images/s on 2 ranks with progress reports and without (the worker run
  through `env -u DDL_PROGRESS_FD`), --runs each, alternating; median.

Prints one table; --json writes the raw records. Needs build/ (launch, train_mnist) and data/mnist;
the torchrun column needs Debian's python3-torch (/usr/bin/python3). Name the CPU with the figures.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.join(REPO, "build", "bin")
DATA = os.path.join(REPO, "data", "mnist")
TORCH_PYTHON = "/usr/bin/python3"

sys.path.insert(0, HERE)
from machine import cpu_model, describe  # noqa: E402,F401  (evict.py, preflight.py take cpu_model)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(ranks):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // ranks))
    return env


class Job:
    """A process group started in its own session, its stderr in a file; killed on exit."""

    def __init__(self, cmd, work, name, env):
        self.err_path = os.path.join(work, name + ".err")
        self.out_path = os.path.join(work, name + ".out")
        self.proc = subprocess.Popen(cmd, stdout=open(self.out_path, "w"),
                                     stderr=open(self.err_path, "w"), env=env,
                                     start_new_session=True)

    def text(self, which="err"):
        with open(self.err_path if which == "err" else self.out_path, errors="replace") as f:
            return f.read()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def wait_for(predicate, timeout, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def last_batch(log):
    found = re.findall(r"epoch: (\d+), batch: (\d+), loss is", log)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def worker_pid(err, rank):
    found = re.findall(rf"started rank {rank} as pid (\d+)", err)
    return int(found[-1]) if found else None


TRAIN = ["--data", DATA, "--epochs", "3", "--save", ""]


def ours_stop(work, flags, marker, cap):
    log_dir = tempfile.mkdtemp(dir=work, prefix="logs-stop-")
    cmd = [os.path.join(BIN, "launch"), "--nproc_per_node=2", "--log_dir", log_dir,
           "--log_level=debug", "--print_config=false", "--kill_timeout=1", *flags,
           os.path.join(BIN, "train_mnist"), *TRAIN, "--log_interval", "100"]
    job = Job(cmd, log_dir, "launch", env_for(2))
    try:
        if not wait_for(lambda: (last_batch(read(os.path.join(log_dir, "workerlog.1"))) or (0, 0))[1] >= 200, 120):
            raise RuntimeError("the job did not reach batch 200:\n" + job.text()[-2000:])
        pid = worker_pid(job.text(), 1)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        seen = wait_for(lambda: marker in job.text(), cap)
        found = time.monotonic() - stopped if seen else None
        line = next((l for l in job.text().splitlines() if marker in l and "stacks of" not in l), "")
        pace = re.search(r"the job's pace is ([\d.]+) (ms|s) per step", line)
        pace_s = (float(pace.group(1)) / (1000 if pace.group(2) == "ms" else 1)) if pace else None
        return {"seconds": found, "pace_s": pace_s, "line": line[-300:]}
    finally:
        job.kill()


def torchrun_stop(work, cap):
    cmd = [TORCH_PYTHON, os.path.join(HERE, "torchrun_py311.py"), "--nproc_per_node=2",
           "--monitor_interval", "0.1", "--master_port", str(free_port()),
           os.path.join(HERE, "ref_train_ddp.py"), "--data_dir", DATA, "--epochs", "3",
           "--log_interval", "1"]
    env = env_for(2)
    env["LOGLEVEL"] = "INFO"
    job = Job(cmd, work, "torchrun", env)
    try:
        def rank1_pid():
            # The worker of rank 1: a ref_train_ddp.py process in this job's session with RANK=1.
            pids = subprocess.run(["pgrep", "-s", str(job.proc.pid), "-f", "ref_train_ddp.py"],
                                  capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if b"\0RANK=1\0" in b"\0" + f.read():
                            return int(pid)
                except OSError:
                    pass
            return None
        if not wait_for(lambda: len(re.findall(r"batch: \d+", job.text("out") + job.text())) >= 100, 180):
            raise RuntimeError("torchrun did not train:\n" + job.text()[-2000:])
        pid = wait_for(rank1_pid, 10)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        seen = wait_for(lambda: job.proc.poll() is not None or "failed" in job.text().lower(), cap, 0.05)
        return {"seconds": time.monotonic() - stopped if seen else None}
    finally:
        job.kill()


def ours_slow(work, cap):
    log_dir = tempfile.mkdtemp(dir=work, prefix="logs-slow-")
    cmd = [os.path.join(BIN, "launch"), "--nproc_per_node=2", "--bind=core", "--log_dir", log_dir,
           "--print_config=false", os.path.join(BIN, "train_mnist"), *TRAIN, "--log_interval", "1"]
    job = Job(cmd, work, "ours-slow", env_for(2))
    busy = None
    try:
        log1 = os.path.join(log_dir, "workerlog.1")
        if not wait_for(lambda: (last_batch(read(log1)) or (0, 0))[1] >= 100, 120):
            raise RuntimeError("the job did not reach batch 100:\n" + job.text()[-2000:])
        busy = subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do :; done"],
                                start_new_session=True)
        epoch, batch = last_batch(read(log1))
        started = time.monotonic()
        seen = wait_for(lambda: "straggler: rank 1 takes" in job.text(), cap)
        line = next((l for l in job.text().splitlines() if "straggler: rank 1 takes" in l), "")
        at = re.search(r"at step (\d+)", line)
        # train_mnist's global step counts from 1 across epochs (300 batches per epoch on 2 ranks).
        per_epoch = 300
        start_step = epoch * per_epoch + batch + 1
        return {"seconds": time.monotonic() - started if seen else None,
                "steps": int(at.group(1)) - start_step if at else None, "line": line[-300:]}
    finally:
        if busy:
            os.killpg(busy.pid, signal.SIGKILL)
            busy.wait()
        job.kill()


def overhead(work, runs):
    rates = {"with": [], "without": []}
    for r in range(runs):
        for side in ("with", "without"):
            log_dir = os.path.join(work, f"logs-rate-{side}-{r}")
            worker = [os.path.join(BIN, "train_mnist")]
            if side == "without":
                worker = ["/usr/bin/env", "-u", "DDL_PROGRESS_FD"] + worker
            cmd = [os.path.join(BIN, "launch"), "--nproc_per_node=2", "--log_dir", log_dir,
                   "--print_config=false", *worker, "--data", DATA, "--epochs", "1", "--save", ""]
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env_for(2),
                           check=True, timeout=600)
            summary = [json.loads(l) for l in read(os.path.join(log_dir, "workerlog.0")).splitlines()
                       if l.startswith("{")][-1]
            rates[side].append(summary["images_per_sec"])
    # Paired: run r with against run r without, back to back, so the machine's drift cancels.
    ratios = [w / wo for w, wo in zip(rates["with"], rates["without"])]
    return {k: statistics.median(v) for k, v in rates.items()} | {
        "paired_ratio": statistics.median(ratios), "raw": rates}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--floor", type=float, default=0.5)
    p.add_argument("--hang", type=float, default=10)
    p.add_argument("--cap", type=float, default=30)
    p.add_argument("--runs", type=int, default=3, help="runs per side for the overhead")
    p.add_argument("--no_torch", action="store_true")
    p.add_argument("--json")
    a = p.parse_args()
    for b in ("launch", "train_mnist"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            sys.exit(f"detect: {BIN}/{b} is missing: build first")
    work = tempfile.mkdtemp(prefix="ddl-detect-")
    rec = {"cpu": cpu_model(), "cores": os.cpu_count(), "machine": describe()}
    rec["stop_ours"] = ours_stop(work, ["--step_timeout_floor=0"],
                                 "step timeout:", a.cap)
    rec["stop_ours_floor"] = ours_stop(work, [f"--step_timeout_floor={a.floor}"], "step timeout:", a.cap)
    rec["stop_fixed"] = ours_stop(work, ["--step_timeout_factor=0", f"--hang_timeout={a.hang}"],
                                  "hang guard:", a.hang + a.cap)
    if not a.no_torch:
        rec["stop_torchrun"] = torchrun_stop(work, a.cap)
    rec["slow_ours"] = ours_slow(work, a.cap)
    rec["overhead"] = overhead(work, a.runs)

    def secs(r):
        return f"{r['seconds']:.2f} s" if r and r.get("seconds") is not None else f"not within {a.cap:.0f} s"
    def paces(r):
        return f" ({r['seconds'] / r['pace_s']:.1f} paces of {r['pace_s'] * 1000:.1f} ms)" \
            if r.get("seconds") and r.get("pace_s") else ""
    so, sf = rec["stop_ours"], rec["stop_ours_floor"]
    print(f"# {rec['machine']}; 2-rank train_mnist (Gloo), torchrun + DDP reference")
    print("| fault | ours (floor 0) | ours (floor F) | fixed --hang_timeout | torchrun |")
    print("|---|---:|---:|---:|---:|")
    print(f"| rank 1 SIGSTOPped | {secs(so)}{paces(so)} | {secs(sf)} (F = {a.floor:g} s) | "
          f"{secs(rec['stop_fixed'])} (H = {a.hang:g} s) | "
          f"{secs(rec.get('stop_torchrun')) if not a.no_torch else 'not run'} |")
    sl = rec["slow_ours"]
    steps = f"{sl['steps']} steps, " if sl.get("steps") is not None else ""
    print(f"| rank 1 at half speed (busy core) | {steps}{secs(sl)} | (the same rule) | never (not "
          f"silent) | never (no detector) |")
    ov = rec["overhead"]
    print(f"\nprogress reports: {ov['with']:.0f} images/s with, {ov['without']:.0f} without "
          f"(medians of {a.runs}); paired with/without {ov['paired_ratio']:.4f} "
          f"({(1 - ov['paired_ratio']) * 100:+.2f}% cost)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
