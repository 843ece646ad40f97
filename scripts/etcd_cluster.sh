#!/usr/bin/env bash
# A local etcd cluster for trying the etcd control plane and for the benchmarks: MEMBERS (default
# 3) members of /usr/bin/etcd on ADDRESS (default 127.0.0.1), each with free client and peer
# ports, as tests/support/etcd_cluster.h starts them for the tests.
#
# Usage: scripts/etcd_cluster.sh start DIR [ADDRESS] [MEMBERS]
#        scripts/etcd_cluster.sh stop DIR
#
# `start` writes everything under DIR (data dirs mN.etcd, logs mN.log, pids mN.pid, the client
# endpoints in `endpoints`), waits (at most 30 s) until the cluster takes a write, and prints the
# client endpoints comma separated (--rdzv_endpoint=$(...), --master=etcd://$(...)).
# DDL_ETCD_COMMAND_PREFIX runs each member under a command, e.g. "ip netns exec NS".
# `stop` kills the members whose pids are in DIR and removes DIR (a failed `start` kills them and
# keeps DIR for its logs). Needs etcd-server, etcd-client
# and python3 (to find free ports). Exit codes: 0 ready / stopped; 1 did not start; 2 usage.
set -uo pipefail

usage() { echo "usage: $0 start DIR [ADDRESS] [MEMBERS] | stop DIR" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd="$1" dir="$2"

kill_members() {
  for pidfile in "$dir"/m*.pid; do
    [[ -f "$pidfile" ]] && kill -9 "$(cat "$pidfile")" 2>/dev/null
  done
}
stop() { kill_members; rm -rf "$dir"; }

case "$cmd" in
  stop) stop; exit 0 ;;
  start) ;;
  *) usage ;;
esac

address="${3:-127.0.0.1}"
members="${4:-3}"
[[ "$members" =~ ^[1-9][0-9]*$ ]] || { echo "$0: MEMBERS must be a positive number, not '$members'" >&2; exit 2; }
mkdir -p "$dir" || exit 1
read -ra prefix <<< "${DDL_ETCD_COMMAND_PREFIX:-}"

# 2 x MEMBERS free ports above the ephemeral range (32768..60999), so that the members' connects
# to each other cannot take one of them before it is bound.
mapfile -t ports < <(python3 -c '
import random, socket, sys
start, found = random.randrange(4000), []
for k in range(4000):
    port = 61000 + (start + k) % 4000
    with socket.socket() as s:
        try: s.bind(("127.0.0.1", port))
        except OSError: continue
    found.append(port)
    if len(found) == int(sys.argv[1]): break
print("\n".join(map(str, found)))' "$((2 * members))")
[[ ${#ports[@]} -eq $((2 * members)) ]] || { echo "$0: not $((2 * members)) free ports in 61000..65000" >&2; exit 1; }

cluster="" endpoints=""
for ((i = 0; i < members; i++)); do
  cluster+="${cluster:+,}m$i=http://$address:${ports[2 * i + 1]}"
  endpoints+="${endpoints:+,}$address:${ports[2 * i]}"
done
for ((i = 0; i < members; i++)); do
  client="http://$address:${ports[2 * i]}" peer="http://$address:${ports[2 * i + 1]}"
  ${prefix[@]+"${prefix[@]}"} /usr/bin/etcd --name "m$i" --data-dir "$dir/m$i.etcd" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$cluster" --initial-cluster-state new \
    --initial-cluster-token "ddl-$$" --heartbeat-interval 50 --election-timeout 500 \
    --logger zap --log-outputs stderr > "$dir/m$i.log" 2>&1 &
  echo $! > "$dir/m$i.pid"
done
echo "$endpoints" > "$dir/endpoints"

for ((t = 0; t < 300; t++)); do
  if ${prefix[@]+"${prefix[@]}"} /usr/bin/etcdctl --endpoints="$endpoints" --command-timeout=1s \
       put ddl/ready 1 > /dev/null 2>&1; then
    echo "$endpoints"
    exit 0
  fi
  sleep 0.1
done
echo "$0: the etcd cluster at $endpoints did not take a write within 30 s; logs in $dir" >&2
tail -n 5 "$dir"/m*.log >&2
kill_members
exit 1
