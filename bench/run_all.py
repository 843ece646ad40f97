"""Runs the side-by-side benchmarks (start-up, first step, all-reduce, training, model parallel,
parameter server, run report) and prints one table.

Called by bench/run_all.sh (see there, and docs/PERFORMANCE.md). Ours and the reference run in the
same invocation, interleaved (the order alternates every repetition), with the same
OMP_NUM_THREADS, and every figure is a median over the repetitions. Needs only the standard
library; the references run under Debian's /usr/bin/python3, the one interpreter that has torch.
"""
import argparse
import datetime
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TORCH_PYTHON = "/usr/bin/python3"

sys.path.insert(0, HERE)
from machine import blas, cpu_flags, cpu_model, peaks  # noqa: E402


# --- machine ------------------------------------------------------------------------------------

def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def command_output(cmd, default="unknown"):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or default
    except (OSError, subprocess.SubprocessError):
        return default


def versions():
    rev = command_output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    dirty = command_output(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], "")
    return {
        "torch": command_output([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"]),
        "python": command_output([TORCH_PYTHON, "-c", "import platform; print(platform.python_version())"]),
        "gloo": command_output(["dpkg-query", "-W", "-f=${Version}", "libgloo-dev"]),
        "libtorch": command_output(["dpkg-query", "-W", "-f=${Version}", "libtorch-dev"]),
        "ddlaunch": rev + ("+local changes" if dirty else ""),
    }


def wait_until_quiet(threshold, max_wait_s):
    """Waits (bounded) until the 1-minute load average is below `threshold`."""
    deadline = time.monotonic() + max_wait_s
    while load1() >= threshold and time.monotonic() < deadline:
        print(f"# load {load1():.2f} >= {threshold}; waiting for a quiet machine ...", flush=True)
        time.sleep(min(30.0, max(1.0, deadline - time.monotonic())))
    return load1()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- running one side ---------------------------------------------------------------------------

class RunFailed(RuntimeError):
    pass


def timed(cmd, env, log_path, timeout_s):
    """Runs `cmd` with stdout+stderr to `log_path`; returns (wall seconds, output text)."""
    with open(log_path, "w") as log:
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{' '.join(cmd)}: no exit after {timeout_s} s (log {log_path})")
        wall = time.perf_counter() - start
    with open(log_path, errors="replace") as f:
        text = f.read()
    if proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-15:])
        raise RunFailed(f"{' '.join(cmd)}: exit code {proc.returncode} (log {log_path}):\n{tail}")
    return wall, text


def json_lines(text):
    for line in text.splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            yield json.loads(line[start:])
        except ValueError:
            continue


class Sides:
    """The two command lines of each benchmark, and where their logs go."""

    def __init__(self, build_dir, work_dir, data_dir):
        self.bin = os.path.join(build_dir, "bin")
        self.work = work_dir
        self.data = data_dir
        self.count = 0

    def log(self, name):
        self.count += 1
        return os.path.join(self.work, f"{self.count:03d}-{name}.log")

    def launch(self, nproc, log_dir, program, *args):
        return [os.path.join(self.bin, "launch"), f"--nproc_per_node={nproc}", "--log_dir", log_dir,
                program, *args]

    def launch_ps(self, servers, workers, log_dir, program, *args):
        return [os.path.join(self.bin, "launch"), f"--server_num={servers}", f"--worker_num={workers}",
                "--log_dir", log_dir, program, *args]

    def torchrun(self, nproc, script, *args):
        # The default static rendezvous (the fastest torchrun offers on one node) on a port that
        # is free now, so concurrent jobs on the machine cannot collide on 29500.
        # script None: `args` are torchrun options and the program (e.g. --no_python /bin/true).
        return [TORCH_PYTHON, os.path.join(HERE, "torchrun_py311.py"), f"--nproc_per_node={nproc}",
                "--monitor_interval", "0.1", "--master_port", str(free_port()),
                *([os.path.join(HERE, script)] if script else []), *args]


def threads_for(ranks):
    return str(max(1, (os.cpu_count() or 1) // ranks))


def env_for(ranks):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = threads_for(ranks)
    return env


# --- the three benchmarks -----------------------------------------------------------------------

def bench_startup(sides, ranks_list, reps, launcher_only):
    """The full job (rendezvous + one all-reduce), and with `launcher_only` also the launchers
    alone running /bin/true workers (torchrun --no_python): what each launcher itself costs."""
    rows = []
    # "job": our worker as a native program links it (rendezvous + Gloo mesh, no LibTorch);
    # "job, LibTorch": the same steps through LibTorch's tensors and prepare_context.
    kinds = [("job", "startup_worker", "startup_ref.py"),
             ("job, LibTorch", "startup_worker_torch", "startup_ref.py")]
    if launcher_only:
        kinds.append(("launcher only", "/bin/true", None))
    for kind, ours_prog, ref_script in kinds:
        for n in ranks_list:
            ours, ref = [], []
            for rep in range(reps):
                order = ("ours", "ref") if rep % 2 == 0 else ("ref", "ours")
                for side in order:
                    if side == "ours":
                        log_dir = os.path.join(sides.work, f"startup-ours-{n}-{rep}")
                        cmd = sides.launch(n, log_dir, ours_prog)
                        wall, _ = timed(cmd, env_for(n), sides.log(f"startup-ours-{n}"), 300)
                        ours.append(wall)
                    else:
                        if ref_script:
                            cmd = sides.torchrun(n, ref_script)
                        else:
                            cmd = sides.torchrun(n, None, "--no_python", "/bin/true")
                        wall, _ = timed(cmd, env_for(n), sides.log(f"startup-ref-{n}"), 300)
                        ref.append(wall)
                print(f"# start-up ({kind}) {n} ranks, rep {rep + 1}/{reps}: ours {ours[-1]:.3f} s, "
                      f"torchrun {ref[-1]:.3f} s (load {load1():.2f})", flush=True)
            rows.append({"kind": kind, "ranks": n, "ours_s": statistics.median(ours),
                         "ref_s": statistics.median(ref), "ours_all": ours, "ref_all": ref,
                         "paired_ratio": statistics.median(r / o for o, r in zip(ours, ref))})
    return rows


def bench_process_floor(sides, reps):
    """One process that only loads the libraries: our worker standalone vs `import torch`."""
    ours, ref = [], []
    env = env_for(1)
    for rep in range(reps):
        with open(os.devnull, "w") as null:
            start = time.perf_counter()
            subprocess.run([os.path.join(sides.bin, "startup_worker_torch")], env=env, stdout=null,
                           stderr=null, check=True)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run([TORCH_PYTHON, "-c", "import torch"], env=env, stdout=null, stderr=null,
                           check=True)
            ref.append(time.perf_counter() - start)
    return {"ours_s": statistics.median(ours), "ref_s": statistics.median(ref)}


def bench_allreduce(sides, reps, max_bytes):
    per_size = {}
    args = ["--max_bytes", str(max_bytes)]
    for rep in range(reps):
        order = ("ours", "ref") if rep % 2 == 0 else ("ref", "ours")
        for side in order:
            if side == "ours":
                cmd = sides.launch(2, os.path.join(sides.work, f"allreduce-ours-{rep}"),
                                   "allreduce_bench", *args)
            else:
                cmd = sides.torchrun(2, "allreduce_ref.py", *args)
            _, text = timed(cmd, env_for(2), sides.log(f"allreduce-{side}"), 900)
            found = [r for r in json_lines(text) if r.get("bench") == "allreduce"]
            if not found:
                raise RunFailed(f"{side} all-reduce printed no result lines")
            for r in found:
                per_size.setdefault(r["bytes"], {"ours": [], "ref": []})[side].append(r["median_us"])
        print(f"# all-reduce rep {rep + 1}/{reps} done (load {load1():.2f})", flush=True)
    rows = []
    for nbytes in sorted(per_size):
        ours = statistics.median(per_size[nbytes]["ours"])
        ref = statistics.median(per_size[nbytes]["ref"])
        pairs = zip(per_size[nbytes]["ours"], per_size[nbytes]["ref"])
        rows.append({"bytes": nbytes, "ours_us": ours, "ref_us": ref,
                     "ours_GBps": nbytes / ours / 1e3, "ref_GBps": nbytes / ref / 1e3,
                     "paired_ratio": statistics.median(r / o for o, r in pairs)})
    return rows


def add_medians(row, runs, keys):
    """row["<side>_<key>"] = the median of `key` over that side's runs, for ours and the reference."""
    for side in ("ours", "ref"):
        for key in keys:
            row[f"{side}_{key}"] = statistics.median(r[key] for r in runs[side])


def rank0_summary(text, side):
    found = [r for r in json_lines(text) if "images_per_sec" in r and r.get("rank", 0) == 0]
    if not found:
        raise RunFailed(f"{side} training printed no summary line of rank 0")
    return found[-1]


def said_blas(worker_log):
    """What train_mnist said it computes with ("BLAS: OpenBLAS 0.3.21, ..."), or None."""
    for line in worker_log.splitlines():
        at = line.find(": BLAS: ")
        if at >= 0:
            return line[at + 2:]
    return None


def bench_training(sides, ranks_list, reps, epochs, max_steps, seed):
    rows = []
    common = ["--epochs", str(epochs), "--batch_size", "100", "--lr", "0.01", "--optimizer", "sgd",
              "--seed", str(seed), "--data_dir", sides.data]
    if max_steps:
        common += ["--max_steps", str(max_steps)]
    ours_blas = None
    for n in ranks_list:
        runs = {"ours": [], "ref": []}
        for rep in range(reps):
            order = ("ours", "ref") if rep % 2 == 0 else ("ref", "ours")
            for side in order:
                if side == "ours":
                    log_dir = os.path.join(sides.work, f"train-ours-{n}-{rep}")
                    # --save '': the reference writes no checkpoint either.
                    cmd = sides.launch(n, log_dir, "train_mnist", *common, "--save", "")
                    wall, text = timed(cmd, env_for(n), sides.log(f"train-ours-{n}"), 1800)
                    with open(os.path.join(log_dir, "workerlog.0"), errors="replace") as f:
                        text = f.read()
                    ours_blas = said_blas(text) or ours_blas
                else:
                    cmd = sides.torchrun(n, "ref_train_ddp.py", *common)
                    wall, text = timed(cmd, env_for(n), sides.log(f"train-ref-{n}"), 1800)
                s = rank0_summary(text, side)
                runs[side].append({"wall_s": wall, "images_per_sec": s["images_per_sec"],
                                   "train_seconds": s["train_seconds"],
                                   "test_accuracy": s["test_accuracy"]})
            print(f"# training {n} rank(s), rep {rep + 1}/{reps}: ours "
                  f"{runs['ours'][-1]['images_per_sec']:.0f} img/s {runs['ours'][-1]['wall_s']:.1f} s, "
                  f"DDP {runs['ref'][-1]['images_per_sec']:.0f} img/s {runs['ref'][-1]['wall_s']:.1f} s "
                  f"(load {load1():.2f})", flush=True)
        row = {"ranks": n, "threads": threads_for(n), "runs": runs, "ours_blas": ours_blas}
        add_medians(row, runs, ("wall_s", "images_per_sec", "train_seconds", "test_accuracy"))
        # Each repetition runs the two sides back to back, so the ratio within a repetition
        # shares its moment's load; the median of those ratios is the robust figure.
        row["paired_speed_ratio"] = statistics.median(
            o["images_per_sec"] / r["images_per_sec"] for o, r in zip(runs["ours"], runs["ref"]))
        row["paired_wall_ratio"] = statistics.median(
            r["wall_s"] / o["wall_s"] for o, r in zip(runs["ours"], runs["ref"]))
        rows.append(row)
    return rows


FIRST_STEP_LINE = re.compile(r"epoch: 0, batch: 0, loss is: \[")


def first_step_timed(cmd, env, log_path, ranks, timeout_s):
    """Runs `cmd` with its output in a pipe, every line stamped as it arrives; returns (seconds
    until the last of `ranks` first-step progress lines, seconds until exit)."""
    seen = []
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            for raw in proc.stdout:
                line = raw.decode(errors="replace")
                log.write(line)
                # torchrun's workers share the pipe unprefixed: two ranks' lines can land in one.
                seen += [time.perf_counter() - start] * len(FIRST_STEP_LINE.findall(line))
                if time.perf_counter() - start > timeout_s:
                    proc.kill()
                    raise RunFailed(f"{' '.join(cmd)}: no exit after {timeout_s} s (log {log_path})")
            code = proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wall = time.perf_counter() - start
    if code != 0:
        raise RunFailed(f"{' '.join(cmd)}: exit code {code} (log {log_path})")
    if len(seen) != ranks:
        raise RunFailed(f"{' '.join(cmd)}: {len(seen)} first-step lines, expected {ranks} (log {log_path})")
    return max(seen), wall


def bench_first_step(sides, ranks, reps, seed):
    """The real trainer's first step: from the launcher's start until every rank has finished its
    first optimizer step (its `epoch: 0, batch: 0, loss is: [L]` line, printed after the step's
    all-reduce and update), and until the job has exited (--max_steps 1, then the test-set pass).
    Both sides print every rank to the launcher's stdout (launch without --log_dir, torchrun
    without redirects), read line by line here."""
    common = ["--epochs", "1", "--batch_size", "100", "--lr", "0.01", "--optimizer", "sgd",
              "--seed", str(seed), "--data_dir", sides.data, "--max_steps", "1"]
    runs = {"ours": [], "ref": []}
    for rep in range(reps):
        order = ("ours", "ref") if rep % 2 == 0 else ("ref", "ours")
        for side in order:
            if side == "ours":
                cmd = [os.path.join(sides.bin, "launch"), f"--nproc_per_node={ranks}",
                       "--print_config=false", "train_mnist", *common, "--save", ""]
            else:
                cmd = sides.torchrun(ranks, "ref_train_ddp.py", *common)
            first, wall = first_step_timed(cmd, env_for(ranks), sides.log(f"first-step-{side}"),
                                           ranks, 300)
            runs[side].append({"first_step_s": first, "wall_s": wall})
        print(f"# first step {ranks} ranks, rep {rep + 1}/{reps}: ours "
              f"{runs['ours'][-1]['first_step_s']:.3f} s (exit {runs['ours'][-1]['wall_s']:.3f} s), "
              f"torchrun+DDP {runs['ref'][-1]['first_step_s']:.3f} s "
              f"(exit {runs['ref'][-1]['wall_s']:.3f} s) (load {load1():.2f})", flush=True)
    row = {"ranks": ranks, "threads": threads_for(ranks), "runs": runs}
    add_medians(row, runs, ("first_step_s", "wall_s"))
    for key in ("first_step_s", "wall_s"):
        row[f"paired_{key}_ratio"] = statistics.median(
            r[key] / o[key] for o, r in zip(runs["ours"], runs["ref"]))
    return row


def mp_summaries(text):
    return [r for r in json_lines(text) if "images_per_sec" in r and "micro_batches" in r]


def bench_model_parallel(sides, reps, max_steps, seed):
    """train_model_parallel: the net cut in two (convolutions on rank 0, fc on rank 1) under
    launch, with 1 and 4 micro-batches, against the unsplit net in one process (--single) on the
    same batches. A pipeline's rate is the slower rank's (every image passes both stages)."""
    common = ["--epochs", "1", "--batch_size", "100", "--lr", "0.01", "--optimizer", "sgd",
              "--seed", str(seed), "--log_interval", "1000", "--data_dir", sides.data]
    if max_steps:
        common += ["--max_steps", str(max_steps)]
    # (label, ranks, threads per rank, extra arguments); the first one is the baseline.
    configs = [("one process, unsplit net", 1, threads_for(1), ["--single", "--micro_batches", "1"]),
               ("one process, unsplit net", 1, "1", ["--single", "--micro_batches", "1", "--threads", "1"]),
               ("pipeline, M=1", 2, threads_for(2), ["--micro_batches", "1"]),
               ("pipeline, M=4", 2, threads_for(2), ["--micro_batches", "4"])]
    runs = {i: [] for i in range(len(configs))}
    for rep in range(reps):
        order = list(range(len(configs)))
        if rep % 2 == 1:
            order.reverse()
        for i in order:
            label, ranks, threads, extra = configs[i]
            program = os.path.join(sides.bin, "train_model_parallel")
            if ranks == 1:
                _, text = timed([program, *common, *extra], env_for(1), sides.log(f"mp-{i}"), 900)
                found = mp_summaries(text)
            else:
                log_dir = os.path.join(sides.work, f"mp-{i}-{rep}")
                timed(sides.launch(ranks, log_dir, program, *common, *extra), env_for(ranks),
                      sides.log(f"mp-{i}"), 900)
                found = []
                for rank in range(ranks):
                    with open(os.path.join(log_dir, f"workerlog.{rank}"), errors="replace") as f:
                        found += mp_summaries(f.read())
            if len(found) != ranks:
                raise RunFailed(f"model parallel '{label}' printed {len(found)} summaries, expected {ranks}")
            runs[i].append({"images_per_sec": min(r["images_per_sec"] for r in found),
                            "test_accuracy": found[0]["test_accuracy"]})
        print(f"# model parallel rep {rep + 1}/{reps}: " + ", ".join(
            f"{configs[i][0]} ({configs[i][1]}x{configs[i][2]}) {runs[i][-1]['images_per_sec']:.0f} img/s"
            for i in range(len(configs))) + f" (load {load1():.2f})", flush=True)
    rows = []
    for i, (label, ranks, threads, extra) in enumerate(configs):
        rows.append({"what": label, "ranks": ranks, "threads": threads,
                     "micro_batches": int(extra[extra.index("--micro_batches") + 1]),
                     "images_per_sec": statistics.median(r["images_per_sec"] for r in runs[i]),
                     "test_accuracy": statistics.median(r["test_accuracy"] for r in runs[i]),
                     "paired_ratio": statistics.median(
                         o["images_per_sec"] / b["images_per_sec"] for o, b in zip(runs[i], runs[0])),
                     "runs": runs[i]})
    return rows


def ps_summaries(text):
    return [r for r in json_lines(text) if "images_per_sec_rank" in r and r.get("role") != "server"]


def bench_ps(sides, reps, max_steps, seed):
    """train_mnist with 2 trainers: collective (all-reduce), then parameter-server jobs, sync and
    async, with 1 and 2 servers, interleaved, on the same seed and steps. Every process gets one
    thread. A job's images/s is the sum of its trainers' own rates (in async mode they differ)."""
    trainers = 2
    common = ["--epochs", "1", "--batch_size", "100", "--lr", "0.01", "--optimizer", "sgd",
              "--seed", str(seed), "--log_interval", "1000", "--threads", "1",
              "--data_dir", sides.data, "--save", ""]
    if max_steps:
        common += ["--max_steps", str(max_steps)]
    # (label, servers, mode the trainers must report, extra arguments); the first is the baseline.
    configs = [("collective (all-reduce)", 0, "collective", []),
               ("sync PS", 1, "ps-sync", []),
               ("sync PS", 2, "ps-sync", []),
               ("async PS", 1, "ps-async", ["--async"]),
               ("async PS", 2, "ps-async", ["--async"])]
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    runs = {i: [] for i in range(len(configs))}
    for rep in range(reps):
        order = list(range(len(configs)))
        if rep % 2 == 1:
            order.reverse()
        for i in order:
            label, servers, mode, extra = configs[i]
            log_dir = os.path.join(sides.work, f"ps-{i}-{rep}")
            if servers:
                cmd = sides.launch_ps(servers, trainers, log_dir, "train_mnist", *common, *extra)
            else:
                cmd = sides.launch(trainers, log_dir, "train_mnist", *common, *extra)
            wall, _ = timed(cmd, env, sides.log(f"ps-{i}"), 900)
            found = []
            for rank in range(trainers):
                with open(os.path.join(log_dir, f"workerlog.{rank}"), errors="replace") as f:
                    found += ps_summaries(f.read())[-1:]
            if len(found) != trainers:
                raise RunFailed(f"'{label}' ({servers} server(s)): {len(found)} trainer summaries, "
                                f"expected {trainers} (logs in {log_dir})")
            if any(r.get("mode") != mode for r in found):
                raise RunFailed(f"'{label}' ({servers} server(s)): trainers report mode "
                                f"{sorted({str(r.get('mode')) for r in found})}, expected {mode}")
            runs[i].append({
                "wall_s": wall,
                "images_per_sec": sum(r["images_per_sec_rank"] for r in found),
                "test_accuracy": found[0]["test_accuracy"],
                "staleness_mean": statistics.mean(r.get("staleness_mean", 0.0) for r in found),
                "staleness_max": max(r.get("staleness_max", 0) for r in found),
                # Share of each trainer's training loop spent pushing gradients / pulling
                # parameters (waiting for the servers included), averaged over the trainers.
                "push_pull_share": statistics.mean(
                    r.get("seconds_in_push_pull", 0.0) / r["train_seconds"] for r in found)})
        print(f"# parameter server rep {rep + 1}/{reps}: " + ", ".join(
            f"{configs[i][0]} ({configs[i][1]} server(s)) {runs[i][-1]['images_per_sec']:.0f} img/s"
            for i in range(len(configs))) + f" (load {load1():.2f})", flush=True)
    rows = []
    for i, (label, servers, mode, extra) in enumerate(configs):
        row = {"what": label, "servers": servers, "trainers": trainers, "mode": mode,
               "paired_ratio": statistics.median(
                   o["images_per_sec"] / b["images_per_sec"] for o, b in zip(runs[i], runs[0])),
               "runs": runs[i]}
        for key in ("wall_s", "images_per_sec", "test_accuracy", "staleness_mean", "push_pull_share"):
            row[key] = statistics.median(r[key] for r in runs[i])
        row["staleness_max"] = max(r["staleness_max"] for r in runs[i])
        rows.append(row)
    return rows


def bench_report(sides, reps, max_steps, seed):
    """What the run report costs: train_mnist, 2 ranks under launch, with --report=true (the
    default: the launcher parses every output line and writes report.json + report.html at the
    end) and --report=false, interleaved. Rank 0's images/s (its JSON summary) and the wall time
    of the whole launch."""
    common = ["--epochs", "1", "--batch_size", "100", "--lr", "0.01", "--optimizer", "sgd",
              "--seed", str(seed), "--data_dir", sides.data, "--save", ""]
    if max_steps:
        common += ["--max_steps", str(max_steps)]
    runs = {"on": [], "off": []}
    for rep in range(reps):
        order = ("on", "off") if rep % 2 == 0 else ("off", "on")
        for side in order:
            log_dir = os.path.join(sides.work, f"report-{side}-{rep}")
            cmd = sides.launch(2, log_dir, "train_mnist", *common)
            cmd.insert(1, f"--report={'true' if side == 'on' else 'false'}")
            wall, _ = timed(cmd, env_for(2), sides.log(f"report-{side}"), 1800)
            with open(os.path.join(log_dir, "workerlog.0"), errors="replace") as f:
                s = rank0_summary(f.read(), f"report {side}")
            written = [name for name in ("report.json", "report.html")
                       if os.path.exists(os.path.join(log_dir, name))]
            if side == "on" and len(written) != 2:
                raise RunFailed(f"--report=true wrote {written or 'nothing'} in {log_dir}, "
                                "expected report.json and report.html")
            if side == "off" and written:
                raise RunFailed(f"--report=false still wrote {written} in {log_dir}")
            size = sum(os.path.getsize(os.path.join(log_dir, name)) for name in written)
            runs[side].append({"wall_s": wall, "images_per_sec": s["images_per_sec"],
                               "report_bytes": size})
        print(f"# run report rep {rep + 1}/{reps}: on {runs['on'][-1]['images_per_sec']:.0f} img/s "
              f"{runs['on'][-1]['wall_s']:.2f} s, off {runs['off'][-1]['images_per_sec']:.0f} img/s "
              f"{runs['off'][-1]['wall_s']:.2f} s (load {load1():.2f})", flush=True)
    row = {"ranks": 2, "threads": threads_for(2), "runs": runs,
           "report_bytes": statistics.median(r["report_bytes"] for r in runs["on"])}
    for side in ("on", "off"):
        for key in ("wall_s", "images_per_sec"):
            row[f"{side}_{key}"] = statistics.median(r[key] for r in runs[side])
    row["paired_speed_ratio"] = statistics.median(
        on["images_per_sec"] / off["images_per_sec"] for on, off in zip(runs["on"], runs["off"]))
    row["paired_wall_ratio"] = statistics.median(
        on["wall_s"] / off["wall_s"] for on, off in zip(runs["on"], runs["off"]))
    return row


# --- the table ----------------------------------------------------------------------------------

def human_bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}"
    return f"{n} B"


def table(result):
    m, v = result["machine"], result["versions"]
    out = []
    out.append(f"Machine: {m['nproc']} CPUs, {m['cpu']} ({m['flags']}), {m['os']}; "
               f"1-min load {m['load_before']:.2f} before, {m['load_after']:.2f} after")
    out.append(f"BLAS: {m.get('blas', 'unknown')} (the reference's, as loaded; ours, as "
               f"train_mnist's first run said: {result.get('ours_blas', 'not run')})")
    out.append(f"Versions: torch {v['torch']} (Python {v['python']}), libtorch {v['libtorch']}, "
               f"gloo {v['gloo']}, ddlaunch {v['ddlaunch']}")
    out.append(f"Run: {result['when']}, mode {result['mode']}, medians of "
               f"{result['reps']['startup']} (start-up), {result['reps'].get('first_step', 0)} (first step), "
               f"{result['reps']['allreduce']} (all-reduce), "
               f"{result['reps']['training']} (training), {result['reps']['model_parallel']} (model parallel), "
               f"{result['reps']['ps']} (parameter server), {result['reps'].get('report', 0)} (run report) "
               f"runs; OMP_NUM_THREADS = cores / ranks on both sides")
    if "startup" in result:
        out.append("")
        out.append("Start-up: launcher invoked -> every rank rendezvoused, one all-reduce, all exited")
        out.append("| what | ranks | ours (launch) | torchrun | speed-up | paired speed-up |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for r in result["startup"]:
            what = {"job": "startup_worker (no LibTorch) vs startup_ref.py",
                    "job, LibTorch": "startup_worker_torch (LibTorch) vs startup_ref.py",
                    }.get(r["kind"], "launcher only: /bin/true workers")
            out.append(f"| {what} | {r['ranks']} | {r['ours_s']:.3f} s | {r['ref_s']:.3f} s | "
                       f"{r['ref_s'] / r['ours_s']:.1f}x | {r['paired_ratio']:.1f}x |")
        if "process_floor" in result:
            f = result["process_floor"]
            out.append(f"| one process loading its libraries: startup_worker_torch alone vs python3 -c 'import torch' "
                       f"| 1 | {f['ours_s']:.3f} s | {f['ref_s']:.3f} s | {f['ref_s'] / f['ours_s']:.1f}x | |")
    if "first_step" in result:
        r = result["first_step"]
        out.append("")
        out.append(f"First step of the real trainer: train_mnist vs ref_train_ddp.py (PyTorch DDP), "
                   f"{r['ranks']} ranks ({r['threads']} threads each), --max_steps 1; launcher invoked -> "
                   f"every rank's first optimizer step done, and -> all exited")
        out.append("| | ours (launch) | torchrun + DDP | speed-up | paired speed-up |")
        out.append("|---|---:|---:|---:|---:|")
        for key, what in (("first_step_s", "first step done on every rank"), ("wall_s", "job exited")):
            out.append(f"| {what} | {r['ours_' + key]:.3f} s | {r['ref_' + key]:.3f} s | "
                       f"{r['ref_' + key] / r['ours_' + key]:.1f}x | {r['paired_' + key + '_ratio']:.1f}x |")
    if "allreduce" in result:
        out.append("")
        out.append("All-reduce, 2 ranks, float32, median latency (algorithm bandwidth)")
        out.append("| size | ours | torch.distributed (Gloo) | speed-up | paired speed-up |")
        out.append("|---:|---:|---:|---:|---:|")
        for r in result["allreduce"]:
            out.append(f"| {human_bytes(r['bytes'])} | {r['ours_us']:.0f} us ({r['ours_GBps']:.2f} GB/s) | "
                       f"{r['ref_us']:.0f} us ({r['ref_GBps']:.2f} GB/s) | {r['ref_us'] / r['ours_us']:.2f}x | "
                       f"{r['paired_ratio']:.2f}x |")
    if "training" in result:
        out.append("")
        out.append(f"Training: MNIST, {result['training_scope']}, batch 100 per rank, SGD lr 0.01")
        out.append("| ranks (threads each) | images/s ours | images/s DDP | ratio (paired) | wall ours | "
                   "wall DDP | ratio (paired) | accuracy ours | accuracy DDP |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in result["training"]:
            out.append(f"| {r['ranks']} ({r['threads']}) | {r['ours_images_per_sec']:.0f} | "
                       f"{r['ref_images_per_sec']:.0f} | "
                       f"{r['ours_images_per_sec'] / r['ref_images_per_sec']:.2f}x "
                       f"({r['paired_speed_ratio']:.2f}x) | "
                       f"{r['ours_wall_s']:.2f} s | {r['ref_wall_s']:.2f} s | "
                       f"{r['ref_wall_s'] / r['ours_wall_s']:.2f}x ({r['paired_wall_ratio']:.2f}x) | "
                       f"{r['ours_test_accuracy']:.4f} | {r['ref_test_accuracy']:.4f} |")
        flops = result["flops_per_image"]
        out.append("")
        out.append(f"Compute: {flops / 1e6:.1f} MFLOP per image (forward + backward, counted from the "
                   "layer shapes); achieved GFLOP/s in the training loop:")
        for r in result["training"]:
            ours = r["ours_images_per_sec"] * flops / 1e9
            ref = r["ref_images_per_sec"] * flops / 1e9
            out.append(f"  {r['ranks']} rank(s): ours {ours:.1f} GFLOP/s, DDP {ref:.1f} GFLOP/s "
                       f"({ours / m['nproc']:.1f} per core)")
            pk = result.get("peaks") or {}
            if pk:
                out.append(f"    share of this machine's limits, measured in this run on all "
                           f"{m['nproc']} cores: sgemm {pk['sgemm']:.1f} GFLOP/s -> ours "
                           f"{100 * ours / pk['sgemm']:.0f}%, DDP {100 * ref / pk['sgemm']:.0f}%; "
                           f"the net's conv2 in oneDNN {pk['conv']:.1f} GFLOP/s -> ours "
                           f"{100 * ours / pk['conv']:.0f}%, DDP {100 * ref / pk['conv']:.0f}%")
    if "model_parallel" in result:
        rows = result["model_parallel"]
        base = rows[0]["images_per_sec"]
        out.append("")
        out.append(f"Model parallel: train_model_parallel, {result['model_parallel_scope']}, batch 100, "
                   f"SGD lr 0.01; conv1+conv2 on rank 0, fc on rank 1; ratio = images/s / the first row's")
        out.append("| what | ranks x threads | micro-batches | images/s | ratio (paired) | accuracy |")
        out.append("|---|---|---:|---:|---:|---:|")
        for r in rows:
            out.append(f"| {r['what']} | {r['ranks']} x {r['threads']} | {r['micro_batches']} | "
                       f"{r['images_per_sec']:.0f} | {r['images_per_sec'] / base:.2f}x "
                       f"({r['paired_ratio']:.2f}x) | {r['test_accuracy']:.4f} |")
    if "ps" in result:
        rows = result["ps"]
        base = rows[0]["images_per_sec"]
        out.append("")
        out.append(f"Parameter server: train_mnist, 2 trainers, {result['ps_scope']}, batch 100 per trainer, "
                   "SGD lr 0.01, 1 thread per process; images/s = sum of the trainers' own rates; "
                   "ratio = images/s / the collective row's")
        out.append("| what | servers | images/s | ratio (paired) | staleness mean (max) | "
                   "push/pull share of the loop | wall | accuracy |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            ps_cols = (f"{r['staleness_mean']:.2f} ({r['staleness_max']}) | {100 * r['push_pull_share']:.1f}%"
                       if r["servers"] else "- | -")
            out.append(f"| {r['what']} | {r['servers']} | {r['images_per_sec']:.0f} | "
                       f"{r['images_per_sec'] / base:.2f}x ({r['paired_ratio']:.2f}x) | {ps_cols} | "
                       f"{r['wall_s']:.2f} s | {r['test_accuracy']:.4f} |")
        ddp = [r for r in result.get("training", []) if r["ranks"] == 2]
        if ddp:
            # Measured by the training benchmark of this run (not interleaved with the rows above).
            d = ddp[0]
            out.append(f"| PyTorch DDP under torchrun, 2 ranks (training benchmark above, "
                       f"{result['training_scope']}) | 0 | {d['ref_images_per_sec']:.0f} | "
                       f"{d['ref_images_per_sec'] / base:.2f}x | - | - | {d['ref_wall_s']:.2f} s | "
                       f"{d['ref_test_accuracy']:.4f} |")
        out.append(f"(the parameter-server section took {result['ps_seconds']:.0f} s)")
    if "report" in result:
        r = result["report"]
        out.append("")
        out.append(f"Run report: train_mnist under launch, {r['ranks']} ranks ({r['threads']} threads each), "
                   f"{result['report_scope']}, batch 100 per rank; --report=true (default) vs "
                   f"--report=false; ratio = on / off")
        out.append("| | --report=true | --report=false | ratio (paired) |")
        out.append("|---|---:|---:|---:|")
        out.append(f"| images/s (rank 0's summary) | {r['on_images_per_sec']:.0f} | {r['off_images_per_sec']:.0f} | "
                   f"{r['on_images_per_sec'] / r['off_images_per_sec']:.3f}x ({r['paired_speed_ratio']:.3f}x) |")
        out.append(f"| wall time of launch | {r['on_wall_s']:.2f} s | {r['off_wall_s']:.2f} s | "
                   f"{r['on_wall_s'] / r['off_wall_s']:.3f}x ({r['paired_wall_ratio']:.3f}x) |")
        out.append(f"(report.json + report.html: {r['report_bytes'] / 1024:.0f} KiB)")
    out.append("")
    out.append("Speed-up = reference / ours on the medians; paired = median over repetitions of the ratio "
               "within one repetition (the two sides ran back to back, so it shares that moment's load).")
    for note in result.get("notes", []):
        out.append(f"NOTE: {note}")
    return "\n".join(out)


def flops_per_image():
    """Forward + backward FLOPs of the MNIST net for one 28x28 image (multiply-add = 2)."""
    conv1 = 28 * 28 * 20 * (1 * 5 * 5) * 2        # 1 -> 20 channels, 5x5, same padding
    conv2 = 14 * 14 * 20 * (20 * 5 * 5) * 2       # 20 -> 20 channels on the pooled 14x14
    fc = 980 * 10 * 2
    forward = conv1 + conv2 + fc
    # Backward: weight gradients for every layer, input gradients for all but the first conv.
    backward = conv1 + 2 * conv2 + 2 * fc
    return forward + backward


# --- main ---------------------------------------------------------------------------------------

DEFAULT_ONLY = "startup,first_step,allreduce,training,model_parallel,ps,report"
BENCHMARKS = ("startup", "first_step", "allreduce", "training", "model_parallel", "ps", "report")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="a fast smoke run: 1 repetition, small sizes, 60 steps")
    p.add_argument("--build_dir", default=os.environ.get("DDL_BUILD_DIR", os.path.join(REPO, "build")))
    p.add_argument("--data_dir", default=os.path.join(REPO, "data", "mnist"))
    p.add_argument("--only", default=DEFAULT_ONLY,
                   help="comma list of benchmarks to run (startup, first_step: the real trainer's first "
                        "step, allreduce, training, model_parallel, ps: "
                        "parameter server, ~1 min; report: the run report's cost, ~2 min)")
    p.add_argument("--startup_reps", type=int, default=5)
    p.add_argument("--first_step_reps", type=int, default=5)
    p.add_argument("--allreduce_reps", type=int, default=3)
    p.add_argument("--train_reps", type=int, default=3)
    p.add_argument("--mp_reps", type=int, default=1, help="repetitions of the model-parallel benchmark")
    p.add_argument("--mp_steps", type=int, default=200,
                   help="optimizer steps per model-parallel run (0: the whole epoch)")
    p.add_argument("--ps_reps", type=int, default=1, help="repetitions of the parameter-server benchmark")
    p.add_argument("--ps_steps", type=int, default=300,
                   help="optimizer steps per trainer in each parameter-server run (0: the whole epoch)")
    p.add_argument("--report_reps", type=int, default=5, help="repetitions of the run-report benchmark")
    p.add_argument("--report_steps", type=int, default=200,
                   help="optimizer steps per rank in each run-report run (0: the whole epoch)")
    p.add_argument("--startup_ranks", default="2,4,8")
    p.add_argument("--train_ranks", default="1,2")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max_load", type=float, default=1.0,
                   help="wait (at most --max_wait_s) for the 1-minute load to drop below this first")
    p.add_argument("--max_wait_s", type=float, default=0)
    p.add_argument("--out", help="folder for the logs and result.json (default: a fresh temp folder)")
    args = p.parse_args()

    only = set(args.only.split(","))
    unknown = only - set(BENCHMARKS)
    if unknown:
        sys.exit(f"run_all: --only: unknown benchmark(s) {', '.join(sorted(unknown))}")
    needed = {"startup": ["launch", "startup_worker", "startup_worker_torch"],
              "first_step": ["launch", "train_mnist"],
              "allreduce": ["launch", "allreduce_bench"],
              "training": ["launch", "train_mnist"],
              "model_parallel": ["launch", "train_model_parallel"],
              "ps": ["launch", "train_mnist"],
              "report": ["launch", "train_mnist"]}
    skipped = []
    model_parallel_bin = os.path.join(args.build_dir, "bin", "train_model_parallel")
    if args.only == DEFAULT_ONLY and not os.access(model_parallel_bin, os.X_OK):
        # The default run predates this benchmark: without its program it runs the others.
        only.discard("model_parallel")
        skipped.append(f"model parallel skipped: {model_parallel_bin} is not built")
    programs = sorted({b for name in only for b in needed[name]})
    missing = [b for b in programs if not os.access(os.path.join(args.build_dir, "bin", b), os.X_OK)]
    if missing:
        sys.exit(f"run_all: {', '.join(missing)} not built in {args.build_dir}/bin "
                 f"(build them, or pass --build_dir)")
    if not os.access(TORCH_PYTHON, os.X_OK):
        sys.exit(f"run_all: {TORCH_PYTHON} (Debian's python3 with python3-torch) not found")

    work = args.out or tempfile.mkdtemp(prefix="ddl-bench-")
    os.makedirs(work, exist_ok=True)
    sides = Sides(args.build_dir, work, args.data_dir)
    quick = args.quick
    reps = {"startup": 1 if quick else args.startup_reps,
            "first_step": 1 if quick else args.first_step_reps,
            "allreduce": 1 if quick else args.allreduce_reps,
            "training": 1 if quick else args.train_reps,
            "model_parallel": 1 if quick else args.mp_reps,
            "ps": 1 if quick else args.ps_reps,
            "report": 1 if quick else args.report_reps}

    load_before = wait_until_quiet(args.max_load, args.max_wait_s)
    result = {
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if quick else "full",
        "reps": reps,
        "machine": {"nproc": os.cpu_count(), "cpu": cpu_model(), "flags": cpu_flags(),
                    "blas": blas(),
                    "os": platform.platform(), "load_before": load_before},
        "versions": versions(),
        "flops_per_image": flops_per_image(),
        "notes": skipped,
    }
    if load_before >= args.max_load:
        result["notes"].append(f"the machine was busy (1-min load {load_before:.2f} >= "
                               f"{args.max_load}); these numbers are not a measurement")
    print(f"# logs in {work}", flush=True)
    try:
        if "startup" in only:
            ranks = [int(x) for x in args.startup_ranks.split(",")]
            result["startup"] = bench_startup(sides, ranks, reps["startup"], launcher_only=True)
            result["process_floor"] = bench_process_floor(sides, reps["startup"])
        if "first_step" in only:
            result["first_step"] = bench_first_step(sides, 2, reps["first_step"], args.seed)
        if "allreduce" in only:
            result["allreduce"] = bench_allreduce(sides, reps["allreduce"],
                                                  (4 << 20) if quick else (64 << 20))
        if "training" in only:
            ranks = [int(x) for x in args.train_ranks.split(",")]
            max_steps = 60 if quick else 0
            result["training_scope"] = (f"{max_steps} steps" if max_steps
                                        else f"{args.epochs} epoch(s) of 60000 images")
            result["training"] = bench_training(sides, ranks, reps["training"], args.epochs,
                                                max_steps, args.seed)
            # The denominator, measured in the same run: what this machine's BLAS and oneDNN
            # reach on every core.
            result["peaks"] = peaks()
            said = [r["ours_blas"] for r in result["training"] if r.get("ours_blas")]
            if said:
                result["ours_blas"] = said[0]
        if "model_parallel" in only:
            mp_steps = 60 if quick else args.mp_steps
            result["model_parallel_scope"] = (f"{mp_steps} steps" if mp_steps
                                              else "1 epoch of 60000 images")
            result["model_parallel"] = bench_model_parallel(sides, reps["model_parallel"], mp_steps,
                                                            args.seed)
        if "ps" in only:
            ps_steps = 60 if quick else args.ps_steps
            result["ps_scope"] = f"{ps_steps} steps" if ps_steps else "1 epoch of 60000 images"
            start = time.perf_counter()
            result["ps"] = bench_ps(sides, reps["ps"], ps_steps, args.seed)
            result["ps_seconds"] = time.perf_counter() - start
        if "report" in only:
            report_steps = 60 if quick else args.report_steps
            result["report_scope"] = (f"{report_steps} steps" if report_steps
                                      else "1 epoch of 60000 images")
            result["report"] = bench_report(sides, reps["report"], report_steps, args.seed)
    except RunFailed as e:
        sys.exit(f"run_all: {e}")
    result["machine"]["load_after"] = load1()
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    text = table(result)
    with open(os.path.join(work, "table.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"# result.json and table.md in {work}")


if __name__ == "__main__":
    main()
