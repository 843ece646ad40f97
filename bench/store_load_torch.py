"""The reference side of bench/store_load.py: the same rendezvous pattern on torch's TCPStore.

    store_load_torch.py serve                       hosts a TCPStore (is_master) on 127.0.0.1;
                                                    prints "port P", serves until stdin closes
    store_load_torch.py clients PORT WORLD FIRST COUNT
                                                    simulates ranks FIRST..FIRST+COUNT-1 of WORLD,
                                                    one thread and one TCPStore client each;
                                                    prints "ready", waits for "go", runs, prints
                                                    "done SECONDS"

The fastest pattern this torch offers (Debian's 1.13: set, get, add, wait, compare_set; no
multi_get): publish with set, a counter barrier (add; the last arriver sets "done"; everyone waits
on that one key), then one wait on all the peers' keys and a get for each (the same peers as
bench/store_load.cpp reads with one multi_get). Runs under /usr/bin/python3.
"""
import datetime
import sys
import threading
import time

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=300)


def address_of(rank):
    return "10.0.%d.%d:29500" % (rank // 256, rank % 256)


def peers_of(rank, world):
    peers = []
    if world > 1:
        peers.append((rank + world - 1) % world)
    step = 1
    while step < world:
        p = (rank + step) % world
        if p != rank and (not peers or peers[-1] != p):
            peers.append(p)
        step *= 2
    return peers


def run_rank(port, rank, world):
    store = dist.TCPStore("127.0.0.1", port, world, False, TIMEOUT, wait_for_workers=False)
    store.set("addr/%d" % rank, address_of(rank))
    if store.add("barrier/count", 1) == world:
        store.set("barrier/done", "1")
    store.wait(["barrier/done"])
    peers = peers_of(rank, world)
    keys = ["addr/%d" % p for p in peers]
    store.wait(keys)
    for p, k in zip(peers, keys):
        got = store.get(k).decode()
        if got != address_of(p):
            raise RuntimeError("rank %d read %r for rank %d, expected %r"
                               % (rank, got, p, address_of(p)))
    return store  # kept open until every rank of this process is done, like a live job


def serve():
    store = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT, wait_for_workers=False)
    print("port %d" % store.port, flush=True)
    for _ in sys.stdin:
        pass


def clients(port, world, first, count):
    go = threading.Event()
    errors = []
    kept = []
    lock = threading.Lock()

    def body(rank):
        go.wait()
        try:
            store = run_rank(port, rank, world)
            with lock:
                kept.append(store)
        except Exception as e:  # reported below, one line
            with lock:
                errors.append("rank %d: %s" % (rank, e))

    threads = [threading.Thread(target=body, args=(first + i,)) for i in range(count)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    go.set()
    for t in threads:
        t.join()
    took = time.monotonic() - start
    if errors:
        print("store_load_torch: %d rank(s) failed; first: %s" % (len(errors), errors[0]),
              file=sys.stderr)
        return 5
    print("done %f" % took, flush=True)
    return 0


def main(argv):
    if argv[1:2] == ["serve"]:
        serve()
        return 0
    if argv[1:2] == ["clients"] and len(argv) == 6:
        return clients(*(int(x) for x in argv[2:6]))
    print("usage: store_load_torch.py serve | clients PORT WORLD FIRST COUNT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
