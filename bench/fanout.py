"""One terminal against one command per host: time to the first training step of `train_mnist`
on 4 hosts, each a network namespace with its own sshd (as tests/e2e/netns/fanout_test.cpp
builds them), started either by hand (one `launch --nnodes=4 --node_rank=K ...` per host, all at
once) or by `launch --hostfile` on host 0, which starts the others over ssh. Needs root, `ip`,
openssh-server and a build; the lab is removed at the end.

    /usr/bin/python3 bench/fanout.py [--reps 3] [--build build]

Prints both medians and the ratio (the goal: --hostfile within 2x of by hand). Both sides run
with --preflight=off: the hosts are namespaces of one machine, whose matmuls run at once on the
same cores would only measure the scheduler (and may name a node).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from machine import describe  # noqa: E402

HOSTS = 4
FIRST_STEP = "loss is"


def run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Lab:
    """A bridge in a hub namespace and one namespace per host, 10.231.<n>.<i+1>/24."""

    def __init__(self, workdir):
        self.prefix = "ddlbf%d" % os.getpid()
        self.hub = self.prefix + "h"
        self.subnet = "10.231.%d." % (os.getpid() % 200 + 20)
        self.dir = workdir
        self.sshd = []
        run("ip", "netns", "add", self.hub)
        run("ip", "netns", "exec", self.hub, "ip", "link", "add", "br0", "type", "bridge")
        run("ip", "netns", "exec", self.hub, "ip", "link", "set", "br0", "up")
        for i in range(HOSTS):
            ns = self.ns(i)
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", "v%d" % i, "netns", self.hub, "type", "veth", "peer", "name",
                "eth0", "netns", ns)
            run("ip", "netns", "exec", self.hub, "ip", "link", "set", "v%d" % i, "master", "br0")
            run("ip", "netns", "exec", self.hub, "ip", "link", "set", "v%d" % i, "up")
            run("ip", "netns", "exec", ns, "ip", "addr", "add", self.address(i) + "/24", "dev", "eth0")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        for name in ("id_key", "host_key"):
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(workdir, name))
        shutil.copy(os.path.join(workdir, "id_key.pub"), os.path.join(workdir, "authorized_keys"))
        self.ssh_config = os.path.join(workdir, "ssh_config")
        with open(self.ssh_config, "w") as f:
            f.write("Host *\n  IdentityFile %s\n  StrictHostKeyChecking no\n"
                    "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n" % os.path.join(workdir, "id_key"))
        os.makedirs("/run/sshd", exist_ok=True)
        for i in range(1, HOSTS):
            config = os.path.join(workdir, "sshd_config.%d" % i)
            with open(config, "w") as f:
                f.write("Port 22\nListenAddress %s\nHostKey %s\nAuthorizedKeysFile %s\n"
                        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n"
                        "LogLevel ERROR\n" % (self.address(i), os.path.join(workdir, "host_key"),
                                             os.path.join(workdir, "authorized_keys")))
            self.sshd.append(subprocess.Popen(
                ["ip", "netns", "exec", self.ns(i), "/usr/sbin/sshd", "-D", "-e", "-f", config],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for _ in range(100):
                if subprocess.run(["ip", "netns", "exec", self.ns(0), "ssh", "-F", self.ssh_config,
                                   "-o", "BatchMode=yes", self.address(i), "true"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
                    break
                time.sleep(0.1)

    def ns(self, i):
        return "%sn%d" % (self.prefix, i)

    def address(self, i):
        return self.subnet + str(i + 1)

    def close(self):
        for p in self.sshd:
            p.kill()
            p.wait()
        for ns in [self.ns(i) for i in range(HOSTS)] + [self.hub]:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass
            subprocess.run(["ip", "netns", "delete", ns], stderr=subprocess.DEVNULL)


def first_step(proc, deadline=180):
    """Seconds until a line with FIRST_STEP appears on `proc`'s stdout; then drains it."""
    start = time.monotonic()
    seen = None
    for line in proc.stdout:
        if seen is None and FIRST_STEP in line:
            seen = time.monotonic() - start
        if time.monotonic() - start > deadline:
            break
    proc.wait()
    if seen is None or proc.returncode != 0:
        raise RuntimeError("no first step (exit %s)" % proc.returncode)
    return seen


def train_args(build):
    return [os.path.join(build, "bin", "train_mnist"), "--data_dir", os.path.join(REPO, "data", "mnist"),
            "--max_steps", "5", "--epochs", "1", "--seed", "7", "--log_interval", "1", "--save", "",
            "--threads", "1"]


def by_hand(lab, build, port):
    launch = os.path.join(build, "bin", "launch")
    env = dict(os.environ, DDL_JOB_SECRET="bench-fanout-secret")
    procs = []
    start = time.monotonic()
    for k in range(HOSTS):
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", lab.ns(k), launch, "--nnodes=%d" % HOSTS, "--node_rank=%d" % k,
             "--master_addr=" + lab.address(0), "--master_port=%d" % port,
             "--local_addr=" + lab.address(k), "--nproc_per_node=1", "--print_config=false",
             "--preflight=off"]
            + train_args(build), env=env, stdout=subprocess.PIPE if k == 0 else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, text=True))
    seconds = first_step(procs[0])
    for p in procs[1:]:
        p.wait()
    return seconds, time.monotonic() - start


def with_hostfile(lab, build, hostfile):
    env = dict(os.environ, DDL_SSH_ARGS="-F " + lab.ssh_config)
    proc = subprocess.Popen(["ip", "netns", "exec", lab.ns(0), os.path.join(build, "bin", "launch"),
                             "--hostfile", hostfile, "--print_config=false",
                             "--preflight=off"] + train_args(build),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return first_step(proc)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="ddl-fanout-bench-")
    lab = Lab(workdir)
    try:
        hostfile = os.path.join(workdir, "hosts")
        with open(hostfile, "w") as f:
            for i in range(HOSTS):
                f.write("%s slots=1\n" % lab.address(i))
        hand, fan = [], []
        for rep in range(args.reps):
            hand.append(by_hand(lab, args.build, 29500 + 2 * rep)[0])
            fan.append(with_hostfile(lab, args.build, hostfile))
        print("machine: " + describe())
        print("time to the first step of train_mnist, %d namespace hosts, 1 rank each, median of %d"
              % (HOSTS, args.reps))
        print("  by hand (one launch per host):  %.2f s  %s" % (statistics.median(hand),
                                                             " ".join("%.2f" % s for s in hand)))
        print("  launch --hostfile (ssh):        %.2f s  %s" % (statistics.median(fan),
                                                             " ".join("%.2f" % s for s in fan)))
        print("  ratio --hostfile / by hand:     %.2fx (goal: at most 2x)"
              % (statistics.median(fan) / statistics.median(hand)))
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
