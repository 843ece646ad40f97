"""Recovery from a lost node and start-up cost: the etcd control plane, the TCP one and torchrun.

Part 1, recovery. An elastic training job of 3 simulated nodes (one launcher per loopback address,
127.0.0.1, .2, .3; `--nnodes=2:3 --max_restarts=2 --rdzv_conf=last_call_timeout=L`, --nproc
ranks per node) trains MNIST; once rank 0 has logged step --warm_steps (past the first checkpoint,
`--save_every 10`), the victim node dies, and the survivors must form the next generation without
it. What is timed: from the SIGKILL to the first training step of the next generation on a
survivor, i.e. the moment a new progress line `epoch: E, batch: B, loss is: [L]` (printed right
after a step, --log_interval 1) appears in a survivor's log after the kill:
- ours: the step must come after the `==== restart K ====` line the launcher writes at the head of
  every worker log of a new generation (`LOG_DIR/workerlog.N`, appended to across restarts), so a
  line of the dying generation never counts; train_mnist resumes from the checkpoint (rank 0 reads
  `<save>.pt` and broadcasts it). Also recorded: when the launcher's debug log says `started rank N
  as pid P` after the kill (the new generation's workers exist: "respawn") and its members
  (`generation K: nodes ...`).
  The victim: SIGKILL of that node's `launch` process only; its workers die with it (the launcher
  arranges that), as they would with the node.
  - etcd plane (`--rdzv_backend=etcd --rdzv_endpoint=<3 members> --rdzv_id=<id>`): node 2 and
    node 0 as victims (no node is special there).
  - TCP plane (`--master_addr=127.0.0.1 --master_port=P`, node 0 hosts the control store): node 2;
    node 0 as victim ends the job (its store is gone): run once, reported as "does not survive"
    with the survivors' exit codes and how long they took to give up.
- torchrun (Debian's torch 1.13 through bench/torchrun_py311.py; c10d rendezvous hosted by node 0's
  agent, `is_host` set explicitly; `--monitor_interval 0.1`, the same --nnodes, --max_restarts and
  last_call_timeout) running bench/ref_train_ddp.py (the same net and batch on DDP/Gloo; it keeps
  no checkpoint, so its next round starts again at `epoch: 0, batch: 0`, which is the line waited
  for). The victim is node 2: its agent and its workers are SIGKILLed together (the agent's
  process group): torchrun's workers outlive a killed agent (they are its plain children) and
  would keep training as orphans, so killing the agent alone is not a lost node.
  Node 0 hosts torchrun's rendezvous store, as it does ours on the TCP plane; it is not a victim.
  "respawn" is when a survivor's agent logs `Rendezvous complete for workers` (LOGLEVEL=INFO), just
  before it starts the round's workers; the round's size is its `group_world_size`.
Part 2, start-up: 2 nodes running hello_worker (build/bin/hello_worker: reads its place in the job,
prints it, exits) from the first launcher's start to the last one's exit, every launcher exiting 0:
ours on the etcd plane, ours on the TCP plane, torchrun c10d (`--no_python hello_worker`). The etcd
cluster is up before and stays up (it is the job's infrastructure, like a torchrun etcd server).

The etcd cluster: 3 members of /usr/bin/etcd on 127.0.0.1 with free ports, started by this script,
checked with `etcdctl endpoint health`, killed at the end; its data directories (under --etcd_dir,
default the system's temp folder) and every job's logs are removed (--keep_logs keeps the logs).
Every process started here runs in its own session and is killed with its group on any exit,
Ctrl-C and exceptions included. Medians of --runs runs; raw records with --json.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from scale_nodes import RunFailed, TORCH_PYTHON, free_port_pair, node_address, run_nodes  # noqa: E402

SECRET = "recovery-bench-secret"
ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"
PROGRESS = re.compile(r"epoch: (\d+), batch: (\d+), loss is: \[")
RESTART = re.compile(r"^==== restart (\d+) ====")
STARTED = re.compile(r"started rank (\d+) as pid (\d+)")
# torchrun's agent (LOGLEVEL=INFO) after its rendezvous, before it starts the round's workers
TORCH_ROUND = re.compile(r"Rendezvous complete for workers")
MEMBERS = re.compile(r"generation (\d+): nodes ([\d, ]+);|group_world_size=(\d+)")
POLL_S = 0.02


class Processes:
    """Every process this script starts, each in its own session; kill_all() kills their groups."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, out_path, env=None, cwd=None):
        out = open(out_path, "w")
        try:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                 start_new_session=True)
        finally:
            out.close()  # the child holds its own copy
        self.procs.append(p)
        return p

    @staticmethod
    def kill(p, sig=signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, p, grace_s=3.0):
        """SIGTERM to p's group, SIGKILL after grace_s, reaped."""
        if p.poll() is None:
            self.kill(p, signal.SIGTERM)
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill(p)  # whatever of its group is left
        p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def kill_all(self):
        for p in self.procs:
            self.kill(p)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held together while picked, so no repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class EtcdCluster:
    """Three etcd members on 127.0.0.1, each with its own data directory under `root`."""

    def __init__(self, procs, root, timeout_s=60.0):
        self.root = tempfile.mkdtemp(prefix="ddl-recovery-etcd-", dir=root)
        ports = free_ports(6)
        self.client = [f"127.0.0.1:{p}" for p in ports[:3]]
        peer = [f"http://127.0.0.1:{p}" for p in ports[3:]]
        cluster = ",".join(f"m{i}={peer[i]}" for i in range(3))
        for i in range(3):
            cmd = [ETCD, "--name", f"m{i}", "--data-dir", os.path.join(self.root, f"m{i}"),
                   "--listen-client-urls", f"http://{self.client[i]}",
                   "--advertise-client-urls", f"http://{self.client[i]}",
                   "--listen-peer-urls", peer[i], "--initial-advertise-peer-urls", peer[i],
                   "--initial-cluster", cluster, "--initial-cluster-state", "new",
                   "--initial-cluster-token", f"ddl-recovery-{os.getpid()}",
                   "--log-level", "warn"]
            procs.start(cmd, os.path.join(self.root, f"m{i}.log"))
        deadline = time.monotonic() + timeout_s
        env = dict(os.environ, ETCDCTL_API="3")
        while True:
            r = subprocess.run([ETCDCTL, f"--endpoints={self.endpoints}", "--dial-timeout=1s",
                                "endpoint", "health"], env=env, capture_output=True, text=True)
            if r.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RunFailed(f"the etcd cluster at {self.endpoints} is not healthy after "
                                f"{timeout_s:.0f} s: {(r.stdout + r.stderr).strip()[-400:]}")
            time.sleep(0.2)

    @property
    def endpoints(self):
        return ",".join(self.client)

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


class LogTail:
    """Reads the lines appended to a set of files since `mark()`; a file that shrank (rewritten)
    is read again from its start. Partial last lines wait for their newline."""

    def __init__(self, paths_fn):
        self.paths_fn = paths_fn
        self.offsets = {}
        self.partial = {}

    def mark(self):
        for path in self.paths_fn():
            try:
                self.offsets[path] = os.path.getsize(path)
            except OSError:
                pass

    def new_lines(self):
        """Yields (path, line) for every complete line written since the last call."""
        for path in self.paths_fn():
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            start = self.offsets.get(path, 0)
            if size < start:
                start, self.partial[path] = 0, ""
            if size == start:
                continue
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(size - start)
            self.offsets[path] = start + len(data)
            text = self.partial.get(path, "") + data.decode("utf-8", "replace")
            *lines, self.partial[path] = text.split("\n")
            for line in lines:
                yield path, line


def worker_logs(log_dir):
    try:
        return [os.path.join(log_dir, n) for n in sorted(os.listdir(log_dir))
                if n.startswith("workerlog.")]
    except OSError:
        return []


def tail_text(path, n=8):
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-n:])
    except OSError as e:
        return f"({e})"


class RecoveryJob:
    """One 3-node elastic job, started, watched and killed; plane is etcd, tcp or torchrun."""

    def __init__(self, args, procs, plane, etcd, run_id):
        self.args, self.procs, self.plane = args, procs, plane
        self.dir = tempfile.mkdtemp(prefix=f"ddl-recovery-{plane}-")
        self.nodes = []
        save = os.path.join(self.dir, "ck")
        data = os.path.join(REPO, "data", "mnist")
        port = free_port_pair()
        for i in range(3):
            node_dir = os.path.join(self.dir, f"node{i}")
            os.makedirs(node_dir)
            log_dir = os.path.join(node_dir, "logs")
            out = os.path.join(node_dir, "launcher.log")
            if plane == "torchrun":
                conf = f"last_call_timeout={args.last_call},is_host={1 if i == 0 else 0}"
                cmd = [TORCH_PYTHON, os.path.join(HERE, "torchrun_py311.py"),
                       "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                       f"--rdzv_id={run_id}", "--nnodes=2:3",
                       f"--nproc_per_node={args.nproc}", "--monitor_interval=0.1",
                       f"--max_restarts={args.max_restarts}", f"--rdzv_conf={conf}",
                       os.path.join(HERE, "ref_train_ddp.py"), "--data_dir", data,
                       "--epochs", "20", "--seed", "7", "--log_interval", "1"]
                env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
                           PYTHONUNBUFFERED="1", LOGLEVEL="INFO")
                # the workers print to the agent's stdout: the node's output file
                logs = (lambda out=out: [out])
            else:
                plane_flags = (
                    ["--rdzv_backend=etcd", f"--rdzv_endpoint={etcd.endpoints}",
                     f"--rdzv_id={run_id}"] if plane == "etcd" else
                    ["--master_addr=127.0.0.1", f"--master_port={port}"])
                cmd = [os.path.join(args.build, "bin", "launch"), "--nnodes=2:3",
                       f"--node_rank={i}", f"--node_ip={node_address(i)}",
                       f"--nproc_per_node={args.nproc}", f"--max_restarts={args.max_restarts}",
                       f"--rdzv_conf=last_call_timeout={args.last_call}", "--log_dir", log_dir,
                       "--log_level=debug", "--print_config=false", "--rendezvous_timeout=120",
                       "--kill_timeout=5", *plane_flags,
                       os.path.join(args.build, "bin", "train_mnist"), "--data_dir", data,
                       "--epochs", "20", "--seed", "7", "--log_interval", "1", "--save", save,
                       "--save_every", "10", "--threads", "1"]
                env = dict(os.environ, DDL_JOB_SECRET=SECRET, OMP_NUM_THREADS="1")
                env.pop("DDL_JOB_ID", None)
                logs = (lambda log_dir=log_dir: worker_logs(log_dir))
            self.nodes.append({"cmd": cmd, "env": env, "out": out, "logs": logs, "proc": None})

    def start(self):
        for node in self.nodes:
            node["proc"] = self.procs.start(node["cmd"], node["out"], env=node["env"],
                                            cwd=self.dir)

    def exited(self):
        return {i: n["proc"].poll() for i, n in enumerate(self.nodes)
                if n["proc"].poll() is not None}

    def wait_for_step(self, step, timeout_s):
        """Until a progress line of batch >= step appears in any worker log (the first
        generation: every rank is at the same batch)."""
        tails = [LogTail(n["logs"]) for n in self.nodes]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for tail in tails:
                for _, line in tail.new_lines():
                    m = PROGRESS.search(line)
                    if m and int(m.group(2)) >= step:
                        return
            if self.exited():
                raise RunFailed(f"{self.plane}: node(s) exited before step {step}: "
                                f"{self.exited()}\n{self.describe()}")
            time.sleep(POLL_S)
        raise RunFailed(f"{self.plane}: no step {step} within {timeout_s:.0f} s\n"
                        f"{self.describe()}")

    def kill_and_time(self, victim, timeout_s):
        """SIGKILLs the victim; returns a record of what the survivors did, timed from the kill."""
        survivors = [i for i in range(3) if i != victim]
        logs = LogTail(lambda: [p for i in survivors for p in self.nodes[i]["logs"]()])
        launcher = LogTail(lambda: [self.nodes[i]["out"] for i in survivors])
        logs.mark()
        launcher.mark()
        after_restart = set()  # files whose new generation began after the kill
        proc = self.nodes[victim]["proc"]
        t_kill = time.perf_counter()
        if self.plane == "torchrun":
            os.killpg(proc.pid, signal.SIGKILL)  # the agent and its workers: the node
        else:
            os.kill(proc.pid, signal.SIGKILL)  # the launcher; its workers die with it
        rec = {"victim": victim, "respawn_s": None, "seconds": None, "step_line": None,
               "next_members": None}
        deadline = t_kill + timeout_s
        while time.perf_counter() < deadline:
            now = time.perf_counter()
            for _, line in launcher.new_lines():
                started = TORCH_ROUND if self.plane == "torchrun" else STARTED
                if rec["respawn_s"] is None and started.search(line):
                    rec["respawn_s"] = now - t_kill
                m = MEMBERS.search(line)
                if m and rec["next_members"] is None:
                    rec["next_members"] = (f"nodes {m.group(2)}" if m.group(2) else
                                           f"{m.group(3)} nodes")
            for path, line in logs.new_lines():
                if self.plane == "torchrun":
                    m = PROGRESS.search(line)
                    new_step = bool(m) and m.group(1) == "0" and m.group(2) == "0"
                else:
                    if RESTART.match(line):
                        after_restart.add(path)
                    new_step = path in after_restart and PROGRESS.search(line) is not None
                if new_step:
                    rec["seconds"] = now - t_kill
                    rec["step_line"] = f"{os.path.relpath(path, self.dir)}: {line.strip()}"
                    return rec
            codes = self.exited()
            if all(i in codes for i in survivors):
                rec["exit_codes"] = {f"node {i}": codes[i] for i in survivors}
                rec["exited_after_s"] = now - t_kill
                return rec
            time.sleep(POLL_S)
        rec["timed_out_s"] = timeout_s
        return rec

    def describe(self):
        return "\n".join(f"--- node {i} ({n['out']}):\n{tail_text(n['out'])}"
                         for i, n in enumerate(self.nodes))

    def stop(self, keep):
        for n in self.nodes:
            if n["proc"] is not None:
                self.procs.stop(n["proc"])
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def recovery_run(args, procs, plane, victim, etcd, run_index):
    run_id = f"recovery-{plane}-{victim}-{run_index}-{os.getpid()}-{time.monotonic_ns()}"
    job = RecoveryJob(args, procs, plane, etcd, run_id)
    try:
        job.start()
        job.wait_for_step(args.warm_steps, args.timeout)
        rec = job.kill_and_time(victim, args.timeout)
        rec.update({"part": "recovery", "plane": plane, "run": run_index})
        if rec["seconds"] is None and "exit_codes" not in rec:
            rec["log_tails"] = job.describe()
        return rec
    finally:
        job.stop(args.keep_logs)


def startup_commands(args, plane, etcd, port, run_id):
    worker = os.path.join(args.build, "bin", "hello_worker")
    if plane == "torchrun":
        return [[TORCH_PYTHON, os.path.join(HERE, "torchrun_py311.py"), "--rdzv_backend=c10d",
                 f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}", "--nnodes=2",
                 "--nproc_per_node=1", "--monitor_interval=0.1", "--max_restarts=0",
                 f"--rdzv_conf=is_host={1 if i == 0 else 0}", "--no_python", worker]
                for i in range(2)]
    plane_flags = (["--rdzv_backend=etcd", f"--rdzv_endpoint={etcd.endpoints}",
                    f"--rdzv_id={run_id}"] if plane == "etcd" else
                   ["--master_addr=127.0.0.1", f"--master_port={port}"])
    return [[os.path.join(args.build, "bin", "launch"), "--nnodes=2", f"--node_rank={i}",
             f"--node_ip={node_address(i)}", "--nproc_per_node=1", "--print_config=false",
             "--rendezvous_timeout=60", *plane_flags, worker] for i in range(2)]


def startup_run(args, plane, etcd, run_index):
    env = dict(os.environ, DDL_JOB_SECRET=SECRET, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("DDL_JOB_ID", None)
    workdir = tempfile.mkdtemp(prefix=f"ddl-recovery-startup-{plane}-")
    run_id = f"startup-{plane}-{run_index}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        seconds = run_nodes(startup_commands(args, plane, etcd, free_port_pair(), run_id), env,
                            workdir, args.timeout)
    finally:
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
    return {"part": "startup", "plane": plane, "run": run_index, "seconds": seconds}


def etcd_plane_works(args, etcd):
    """None if this build's launcher runs a 2-node hello_worker job on the etcd plane (a run that
    is not recorded), else why not."""
    try:
        startup_run(args, "etcd", etcd, -1)
        return None
    except RunFailed as e:
        return str(e).replace("\n", " | ")[-600:]


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, width=12):
    return f"{v:{width}.2f}" if v is not None else f"{'-':>{width}}"


def ratio(ref, ours):
    return f"{ref / ours:9.1f}x" if ref is not None and ours else f"{'-':>10}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per case (medians)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the build folder")
    ap.add_argument("--json", help="write the raw records here")
    ap.add_argument("--parts", default="recovery,startup", help="recovery, startup or both")
    ap.add_argument("--planes", default="etcd,tcp,torchrun",
                    help="which of etcd, tcp, torchrun to run")
    ap.add_argument("--nproc", type=int, default=1, help="ranks per node in the recovery job")
    ap.add_argument("--last_call", type=int, default=2,
                    help="rdzv_conf last_call_timeout (s) of the elastic jobs")
    ap.add_argument("--max_restarts", type=int, default=2)
    ap.add_argument("--warm_steps", type=int, default=15,
                    help="the victim dies once rank 0 has logged this step")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per wait")
    ap.add_argument("--etcd_dir", default=tempfile.gettempdir(),
                    help="where the etcd members' data directories go")
    ap.add_argument("--keep_logs", action="store_true", help="keep each run's folder")
    args = ap.parse_args()

    args.build = os.path.abspath(args.build)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    planes = [p.strip() for p in args.planes.split(",") if p.strip()]
    if not parts <= {"recovery", "startup"} or not set(planes) <= {"etcd", "tcp", "torchrun"}:
        sys.exit("recovery: --parts takes recovery,startup and --planes etcd,tcp,torchrun")
    if args.runs < 1 or args.nproc < 1:
        sys.exit("recovery: --runs and --nproc must be 1 or more")
    need = ["hello_worker"] + (["train_mnist"] if "recovery" in parts else [])
    if "etcd" in planes or "tcp" in planes:
        need.append("launch")
    for program in need:
        if not os.access(os.path.join(args.build, "bin", program), os.X_OK):
            sys.exit(f"recovery: {args.build}/bin/{program} is missing: build it first")
    if "recovery" in parts and not os.path.exists(os.path.join(REPO, "data", "mnist")):
        sys.exit("recovery: the MNIST data (data/mnist) is missing")
    if "etcd" in planes and not os.access(ETCD, os.X_OK):
        sys.exit(f"recovery: {ETCD} is missing (Debian's etcd-server)")
    if "torchrun" in planes and subprocess.run([TORCH_PYTHON, "-c", "import torch"],
                                               capture_output=True).returncode != 0:
        sys.exit(f"recovery: {TORCH_PYTHON} cannot import torch (Debian's python3-torch)")

    procs = Processes()
    etcd = None
    records = []
    notes = {}

    def on_term(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        if "etcd" in planes:
            etcd = EtcdCluster(procs, args.etcd_dir)
            print(f"# etcd cluster: 3 members at {etcd.endpoints}", flush=True)
            why = etcd_plane_works(args, etcd)
            if why:
                notes["etcd"] = f"not run: this build's launcher has no etcd plane ({why})"
                print(f"# etcd plane {notes['etcd']}", flush=True)
                planes.remove("etcd")

        if "recovery" in parts:
            cases = []  # (plane, victim, runs)
            for plane in planes:
                if plane == "etcd":
                    cases += [("etcd", 2, args.runs), ("etcd", 0, args.runs)]
                elif plane == "tcp":
                    cases += [("tcp", 2, args.runs), ("tcp", 0, 1)]
                else:
                    cases += [("torchrun", 2, args.runs)]
            print(f"# recovery: {args.nproc} rank(s) per node, 3 nodes, --nnodes=2:3, "
                  f"last_call_timeout={args.last_call}, victim killed at step {args.warm_steps}",
                  flush=True)
            # interleaved: run r of every case before run r + 1 of any
            for r in range(args.runs):
                for plane, victim, runs in cases:
                    if r >= runs:
                        continue
                    rec = recovery_run(args, procs, plane, victim, etcd, r)
                    records.append(rec)
                    if rec["seconds"] is not None:
                        what = (f"first step after {rec['seconds']:.2f} s"
                                + (f" (respawn {rec['respawn_s']:.2f} s)"
                                   if rec["respawn_s"] is not None else "")
                                + f", next generation: {rec['next_members']}: {rec['step_line']}")
                    elif "exit_codes" in rec:
                        what = (f"no next generation: survivors exited {rec['exit_codes']} "
                                f"{rec['exited_after_s']:.2f} s after the kill")
                    else:
                        what = f"no new step within {rec['timed_out_s']:.0f} s"
                    print(f"#   {plane} kill node {victim}, run {r + 1}: {what}", flush=True)
                    if rec.get("log_tails"):
                        print(rec["log_tails"], flush=True)

        if "startup" in parts:
            print("# start-up: 2 nodes x hello_worker, first start to last exit", flush=True)
            for r in range(args.runs):
                for plane in planes:
                    rec = startup_run(args, plane, etcd, r)
                    records.append(rec)
                    print(f"#   {plane} run {r + 1}: {rec['seconds']:.2f} s", flush=True)
    finally:
        procs.kill_all()
        if etcd:
            etcd.remove()
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"notes": notes, "records": records}, f, indent=1)

    def series(part, plane, victim=None):
        return [r for r in records if r["part"] == part and r["plane"] == plane
                and (victim is None or r.get("victim") == victim)]

    def not_run(plane):
        return notes.get(plane, "not run (--planes)") if plane not in planes else None

    if "recovery" in parts:
        print(f"\nRecovery: SIGKILL of one node to the next generation's first step on the "
              f"survivors, seconds, median of {args.runs} run(s)")
        print(f"{'victim':<8} {'ours etcd':>12} {'ours TCP':>12} {'torchrun':>12} "
              f"{'torchrun/etcd':>14} {'torchrun/TCP':>13}")
        for victim in (2, 0):
            med = {p: median_or_none(r["seconds"] for r in series("recovery", p, victim))
                   for p in ("etcd", "tcp", "torchrun")}
            print(f"node {victim:<3} {fmt(med['etcd'])} {fmt(med['tcp'])} {fmt(med['torchrun'])} "
                  f"{ratio(med['torchrun'], med['etcd']):>14} {ratio(med['torchrun'], med['tcp']):>13}")
        for plane in ("etcd", "tcp", "torchrun"):
            if not_run(plane):
                print(f"  {plane}: {not_run(plane)}")
        for rec in series("recovery", "tcp", 0):
            if "exit_codes" in rec:
                print(f"  TCP, node 0 killed: does not survive: the survivors exit "
                      f"{rec['exit_codes']} {rec['exited_after_s']:.2f} s after the kill "
                      f"(node 0 hosts the control store)")
        print("  torchrun, node 0: not a victim (its agent hosts the c10d rendezvous store)")
        for plane in ("etcd", "tcp", "torchrun"):
            resp = median_or_none(r["respawn_s"] for r in series("recovery", plane)
                                  if r["seconds"] is not None)
            if resp is not None:
                print(f"  {plane}: new workers started (launcher log) after {resp:.2f} s "
                      f"(median over its cases)")
        failed = [r for r in records if r["part"] == "recovery" and r["seconds"] is None
                  and not (r["plane"] == "tcp" and r["victim"] == 0)]
        for rec in failed:
            print(f"  FAILED: {rec['plane']} kill node {rec['victim']} run {rec['run'] + 1}: "
                  f"{rec.get('exit_codes') or 'timed out'}")
    if "startup" in parts:
        print(f"\nStart-up: 2 nodes x hello_worker, first start to last exit, seconds, median of "
              f"{args.runs}")
        ref = median_or_none(r["seconds"] for r in series("startup", "torchrun"))
        for plane, name in (("etcd", "ours etcd"), ("tcp", "ours TCP"), ("torchrun", "torchrun")):
            med = median_or_none(r["seconds"] for r in series("startup", plane))
            extra = f"  ({not_run(plane)})" if not_run(plane) else ""
            print(f"{name:<10} {fmt(med)} {'torchrun/this':>14} {ratio(ref, med)}{extra}")
    if args.json:
        print(f"# wrote {len(records)} records to {args.json}")


if __name__ == "__main__":
    try:
        main()
    except RunFailed as e:
        sys.exit(f"recovery: {e}")
    except KeyboardInterrupt:
        sys.exit("recovery: interrupted; everything it started is stopped")
