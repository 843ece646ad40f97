#!/usr/bin/env bash
# A real two-node Slurm cluster on this one machine, for trying `srun ... launch ...` and for the
# tests in tests/e2e/schedulers/: one munged, one slurmctld and two slurmd daemons (`slurmd -N n1` on
# 127.0.0.1:17001, `slurmd -N n2` on 127.0.0.2:17002), partition `ddl` with both nodes.
#
# Usage: scripts/slurm_cluster.sh start|stop|status
#
# Everything the cluster writes lives in ONE folder, /tmp/ddl-slurm (DDL_SLURM_DIR overrides it):
#   slurm.conf        the cluster's configuration (point SLURM_CONF at it; see below)
#   munge/            a munged of its own: socket and pid; munge/private/: its key (made at the
#                     first start) and seed (the system's munged and /etc/munge are not touched)
#   ctld/             slurmctld's state; spool/n1, spool/n2: each slurmd's spool
#   run/, log/        pid and log files (slurmctld.log, slurmd-n1.log, slurmd-n2.log, munged.log)
# `stop` cancels every job of the cluster, stops the four daemons (and any slurmstepd they left),
# and removes that folder. The only things written outside it:
#   - /etc/hosts gets the lines `127.0.0.1 n1` and `127.0.0.2 n2` appended when the names do not
#     resolve yet (the file is only appended to, never rewritten; the lines stay after `stop`);
#   - /etc/slurm/slurm.conf, a copy of the cluster's slurm.conf, is written only when that file is
#     absent or was written by this script (its first line is the marker below), so that plain
#     `srun`/`sinfo` work without SLURM_CONF; `stop` removes it again. A slurm.conf of someone
#     else's is left alone: then export SLURM_CONF=/tmp/ddl-slurm/slurm.conf (`start` says so).
#
# Configuration in short: auth/munge, proctrack/linuxproc, task/none (no cgroups), no accounting,
# no job completion log, root as SlurmUser and SlurmdUser, select/cons_tres with CPUs as the
# consumable, KillWait=5 (scancel/time limit: SIGTERM, then SIGKILL 5 s later), finished jobs kept
# 10 minutes for `scontrol show job`. Needs root, munge and Slurm's slurmctld/slurmd/client tools
# (Debian: munge slurmctld slurmd slurm-client).
#
# `start` is idempotent (daemons already running are kept) and waits, at most
# DDL_SLURM_TIMEOUT seconds (default 60), until `sinfo` shows both nodes idle. Exit codes:
# 0 ready / stopped / (status) everything up; 1 could not start or a daemon is missing;
# 2 usage; 3 (status) cluster not running.
set -uo pipefail

readonly STATE="${DDL_SLURM_DIR:-/tmp/ddl-slurm}"
readonly CONF="${STATE}/slurm.conf"
readonly ETC_CONF="/etc/slurm/slurm.conf"
readonly MARKER="# written by ddlaunch scripts/slurm_cluster.sh; removed by its 'stop'"
readonly MUNGE_DIR="${STATE}/munge"
readonly MUNGE_SOCKET="${MUNGE_DIR}/munge.socket"
readonly MUNGE_KEY="${MUNGE_DIR}/private/munge.key"
readonly MUNGE_PID="${MUNGE_DIR}/munged.pid"
readonly RUN="${STATE}/run"
readonly LOG="${STATE}/log"
readonly TIMEOUT="${DDL_SLURM_TIMEOUT:-60}"
readonly CTLD_PORT=16817
readonly NODES=(n1 n2)
declare -A NODE_ADDR=([n1]=127.0.0.1 [n2]=127.0.0.2)
declare -A NODE_PORT=([n1]=17001 [n2]=17002)
# Every daemon started here carries this variable, and so do the slurmstepd processes slurmd
# forks: `stop` finds stragglers by it, never by a process name alone.
readonly TAG="DDL_SLURM_CLUSTER=${STATE}"

export SLURM_CONF="${CONF}"
# The daemons live in sbin, which a non-login or sudo PATH may lack.
export PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin"

die() {
  echo "slurm_cluster: error: $*" >&2
  exit 1
}
say() { echo "slurm_cluster: $*" >&2; }

need_root() {
  [[ "$(id -u)" == 0 ]] || die "must run as root (the slurmd daemons start jobs as any user; uid is $(id -u))"
}

need_tools() {
  local tool
  for tool in munged munge slurmctld slurmd slurmstepd sinfo scontrol squeue scancel srun sbatch; do
    command -v "${tool}" >/dev/null 2>&1 ||
      die "'${tool}' not found in PATH (install Debian packages: munge slurmctld slurmd slurm-client)"
  done
}

# The pid in file $1 if that process is alive (and not a zombie); empty otherwise.
live_pid() {
  local pid
  [[ -s "$1" ]] || return 1
  pid="$(tr -dc '0-9' <"$1")"
  [[ -n "${pid}" && -d "/proc/${pid}" ]] || return 1
  [[ "$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null)" != Z ]] || return 1
  echo "${pid}"
}

pidfile_of() {
  case "$1" in
    munged) echo "${MUNGE_PID}" ;;
    slurmctld) echo "${RUN}/slurmctld.pid" ;;
    slurmd-*) echo "${RUN}/$1.pid" ;;
  esac
}

ensure_hosts() {
  local node
  for node in "${NODES[@]}"; do
    local want="${NODE_ADDR[$node]}" got
    got="$(getent ahostsv4 "${node}" 2>/dev/null | awk 'NR==1{print $1}')"
    if [[ -z "${got}" ]]; then
      [[ -w /etc/hosts ]] || die "host name ${node} does not resolve and /etc/hosts is not writable"
      # A file without a final newline would glue our line onto its last one.
      [[ -s /etc/hosts && -n "$(tail -c1 /etc/hosts)" ]] && echo >>/etc/hosts
      echo "${want} ${node}  # ddl-slurm test node" >>/etc/hosts || die "cannot append to /etc/hosts"
      say "added '${want} ${node}' to /etc/hosts"
    elif [[ "${got}" != "${want}" ]]; then
      die "host name ${node} resolves to ${got}, not ${want}; fix /etc/hosts (this script does not rewrite it)"
    fi
  done
}

write_conf() {
  local ctld_host
  ctld_host="$(hostname -s 2>/dev/null || hostname)"
  [[ -n "${ctld_host}" ]] || die "cannot read this machine's host name (slurmctld needs it)"
  local cpus
  cpus="$(nproc 2>/dev/null || echo 1)"
  local tmp="${CONF}.tmp.$$"
  {
    echo "${MARKER}"
    echo "# A two-node cluster on one machine (both nodes are this host's CPUs); state: ${STATE}"
    echo "ClusterName=ddl"
    echo "SlurmctldHost=${ctld_host}(127.0.0.1)"
    echo "SlurmctldPort=${CTLD_PORT}"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=${MUNGE_SOCKET}"
    echo "StateSaveLocation=${STATE}/ctld"
    echo "SlurmdSpoolDir=${STATE}/spool/%n"
    echo "SlurmctldPidFile=${RUN}/slurmctld.pid"
    echo "SlurmdPidFile=${RUN}/slurmd-%n.pid"
    echo "SlurmctldLogFile=${LOG}/slurmctld.log"
    echo "SlurmdLogFile=${LOG}/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "JobContainerType=job_container/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SlurmdParameters=config_overrides"
    echo "PropagateResourceLimits=NONE"
    echo "ReturnToService=2"
    echo "KillWait=5"
    echo "MinJobAge=600"
    echo "InactiveLimit=0"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=60"
    echo "MessageTimeout=10"
    local node
    for node in "${NODES[@]}"; do
      echo "NodeName=${node} NodeAddr=${NODE_ADDR[$node]} Port=${NODE_PORT[$node]} CPUs=${cpus} State=UNKNOWN"
    done
    echo "PartitionName=ddl Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"${tmp}" && mv -f "${tmp}" "${CONF}" || die "cannot write ${CONF}"
}

install_etc_conf() {
  if [[ -e "${ETC_CONF}" ]] && [[ "$(head -n1 "${ETC_CONF}" 2>/dev/null)" != "${MARKER}" ]]; then
    say "${ETC_CONF} exists and is not this script's: left alone; use: export SLURM_CONF=${CONF}"
    return
  fi
  mkdir -p "$(dirname "${ETC_CONF}")" && cp -f "${CONF}" "${ETC_CONF}" ||
    say "could not write ${ETC_CONF}; use: export SLURM_CONF=${CONF}"
}

start_munged() {
  if live_pid "${MUNGE_PID}" >/dev/null && munge -n -S "${MUNGE_SOCKET}" >/dev/null 2>&1; then
    return
  fi
  # The socket's folder must be searchable by everyone, the key's by root only.
  mkdir -p "${MUNGE_DIR}/private" && chmod 0755 "${MUNGE_DIR}" && chmod 0700 "${MUNGE_DIR}/private" ||
    die "cannot create ${MUNGE_DIR}"
  if [[ ! -s "${MUNGE_KEY}" ]]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="${MUNGE_KEY}" >/dev/null 2>&1 || rm -f "${MUNGE_KEY}"
    fi
    [[ -s "${MUNGE_KEY}" ]] || head -c 1024 /dev/urandom >"${MUNGE_KEY}" ||
      die "cannot create the munge key ${MUNGE_KEY}"
  fi
  chmod 0600 "${MUNGE_KEY}"
  rm -f "${MUNGE_SOCKET}" "${MUNGE_SOCKET}.lock"
  env "${TAG}" munged --socket="${MUNGE_SOCKET}" --key-file="${MUNGE_KEY}" \
    --pid-file="${MUNGE_PID}" --seed-file="${MUNGE_DIR}/private/munged.seed" \
    --log-file="${LOG}/munged.log" >>"${LOG}/munged.start" 2>&1 ||
    die "munged did not start: $(tail -n1 "${LOG}/munged.start" 2>/dev/null) (see ${LOG}/munged.log)"
  local i
  for ((i = 0; i < 50; ++i)); do
    munge -n -S "${MUNGE_SOCKET}" >/dev/null 2>&1 && return
    sleep 0.1
  done
  die "munged started but does not answer on ${MUNGE_SOCKET} (see ${LOG}/munged.log)"
}

# start_daemon NAME COMMAND...: runs COMMAND (which forks into the background) unless NAME's pid
# file names a live process.
start_daemon() {
  local name="$1"
  shift
  live_pid "$(pidfile_of "${name}")" >/dev/null && return
  env "${TAG}" "$@" >>"${LOG}/${name}.start" 2>&1 ||
    die "${name} did not start: $(tail -n1 "${LOG}/${name}.start" 2>/dev/null) (see ${LOG}/)"
  local i
  for ((i = 0; i < 100; ++i)); do
    live_pid "$(pidfile_of "${name}")" >/dev/null && return
    sleep 0.1
  done
  die "${name} exited right after starting: $(tail -n1 "${LOG}/${name%%-*}${name#slurmd}.log" 2>/dev/null) (see ${LOG}/)"
}

node_states() { sinfo -h -N -p ddl -o '%N %t' 2>/dev/null | sort -u; }

wait_idle() {
  local deadline=$((SECONDS + TIMEOUT)) states resumed=0
  while ((SECONDS < deadline)); do
    states="$(node_states)"
    if [[ "$(echo "${states}" | awk '$2 == "idle" || $2 == "mix" || $2 == "alloc" {n++} END {print n + 0}')" == 2 ]]; then
      return 0
    fi
    # A node left down or drained by an earlier run (e.g. an unclean stop) is put back once.
    if ((resumed == 0)) && echo "${states}" | grep -Eq ' (down|drain|drng|drained)'; then
      scontrol update NodeName=n[1-2] State=RESUME >/dev/null 2>&1
      resumed=1
    fi
    sleep 0.5
  done
  die "nodes not idle after ${TIMEOUT} s (sinfo: $(echo "${states:-no answer}" | tr '\n' ' ')); see ${LOG}/slurmctld.log and ${LOG}/slurmd-n1.log"
}

cmd_start() {
  need_root
  need_tools
  ensure_hosts
  mkdir -p "${STATE}" "${RUN}" "${LOG}" "${STATE}/ctld" "${STATE}/spool/n1" "${STATE}/spool/n2" ||
    die "cannot create ${STATE}"
  if ! live_pid "$(pidfile_of slurmctld)" >/dev/null; then
    write_conf  # only while the controller is down: a running cluster keeps the file it read
  fi
  [[ -s "${CONF}" ]] || write_conf
  install_etc_conf
  start_munged
  start_daemon slurmctld slurmctld
  local node
  for node in "${NODES[@]}"; do
    start_daemon "slurmd-${node}" slurmd -N "${node}"
  done
  wait_idle
  echo "slurm_cluster: ready: nodes n1 (127.0.0.1:17001) and n2 (127.0.0.2:17002) idle in partition ddl; SLURM_CONF=${CONF}"
}

# Processes carrying this cluster's tag (daemons, slurmstepd), this script's own excluded.
tagged_pids() {
  local dir pid
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [[ "${pid}" == "$$" || "${pid}" == "${BASHPID}" ]] && continue
    { tr '\0' '\n' <"${dir}/environ"; } 2>/dev/null | grep -qxF "${TAG}" && echo "${pid}"
  done
}

# stop_pids SIGNAL-WAIT-SECONDS PID...: SIGTERM, then SIGKILL after the wait.
stop_pids() {
  local wait_s="$1" pid i
  shift
  (($# == 0)) && return
  kill -TERM "$@" 2>/dev/null
  for ((i = 0; i < wait_s * 10; ++i)); do
    local left=0
    for pid in "$@"; do [[ -d "/proc/${pid}" ]] && [[ "$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null)" != Z ]] && left=1; done
    ((left == 0)) && return
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null
}

cmd_stop() {
  need_root
  local pid name
  # Jobs first, while the daemons can still end them cleanly (their tasks die with the steps).
  if live_pid "$(pidfile_of slurmctld)" >/dev/null && command -v squeue >/dev/null 2>&1; then
    if [[ -n "$(squeue -h -o %i 2>/dev/null)" ]]; then
      scancel --full --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null
      local i
      for ((i = 0; i < 150; ++i)); do
        [[ -z "$(squeue -h -t all -o '%i %t' 2>/dev/null | awk '$2 != "CA" && $2 != "CD" && $2 != "F" && $2 != "TO" && $2 != "NF" && $2 != "OOM"')" ]] && break
        sleep 0.1
      done
    fi
  fi
  for name in slurmd-n1 slurmd-n2 slurmctld; do
    pid="$(live_pid "$(pidfile_of "${name}")")" && stop_pids 10 "${pid}"
  done
  # slurmstepd processes outlive slurmd by design; whatever still carries the tag goes now.
  # shellcheck disable=SC2046
  stop_pids 5 $(tagged_pids | grep -vx "$(live_pid "${MUNGE_PID}")")
  pid="$(live_pid "${MUNGE_PID}")" && stop_pids 5 "${pid}"
  # shellcheck disable=SC2046
  stop_pids 2 $(tagged_pids)
  if [[ -e "${ETC_CONF}" && "$(head -n1 "${ETC_CONF}" 2>/dev/null)" == "${MARKER}" ]]; then
    rm -f "${ETC_CONF}"
  fi
  case "${STATE}" in
    /*/?*) rm -rf "${STATE}" ;;
    *) die "refusing to remove '${STATE}' (not an absolute folder below /)" ;;
  esac
  [[ -z "$(tagged_pids)" ]] || die "processes of the cluster are still running: $(tagged_pids | tr '\n' ' ')"
  echo "slurm_cluster: stopped (nothing of it left running; ${STATE} removed)"
}

cmd_status() {
  local name pid up=0 down=0
  for name in munged slurmctld slurmd-n1 slurmd-n2; do
    if pid="$(live_pid "$(pidfile_of "${name}")")"; then
      echo "${name}: running (pid ${pid})"
      up=$((up + 1))
    else
      echo "${name}: not running"
      down=$((down + 1))
    fi
  done
  if ((up > 0)) && live_pid "$(pidfile_of slurmctld)" >/dev/null; then
    echo "nodes:"
    node_states | sed 's/^/  /'
  fi
  echo "state folder: ${STATE}; SLURM_CONF=${CONF}"
  ((down == 0)) && return 0
  ((up == 0)) && return 3
  return 1
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
