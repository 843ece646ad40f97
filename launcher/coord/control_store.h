// What the control-plane engine (launcher/coord/engine.h) needs of the place the launchers of a
// job share: append-only rosters, single-writer cells, one compare-and-set, a wait. Three short
// implementations (made by the functions at the end): node 0's TCP store, an etcd v3 cluster and
// memory (for tests). Everything the job
// decides (who holds a node rank, the members of a generation, how it ended, the job's failure) is
// a rule of the engine over these primitives, written once.
//
// A roster is a list that only grows; its entries keep the order in which they landed, the same
// for every reader, so "the first entry that verifies" is one answer for every node. A cell is a
// key that one launcher writes and others read (heartbeats). Names are the engine's (the run's
// token first); each store puts them under its own namespace.
//
// Thread-safety: one ControlStore is used by one thread at a time; connect() makes another for a
// second thread. Errors: ControlStoreError (unreachable, a request that failed or timed out).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/coord/control_plane.h"
#include "launcher/coord/records.h"

namespace ddl::launcher {

// The store could not be reached or a request failed; the message names the store. `store_gone`:
// the store is not coming back (node 0's TCP store, whose connection broke), so waiting for it
// is pointless; otherwise (etcd) a later request may find a member again.
class ControlStoreError : public ControlError {
 public:
  explicit ControlStoreError(const std::string& what, bool store_gone = false)
      : ControlError(what), store_gone_(store_gone) {}
  bool store_gone() const { return store_gone_; }

 private:
  bool store_gone_;
};

// Where a reader of a roster is: entries past it are new. 0: before the first.
using RosterCursor = std::int64_t;

class ControlStore {
 public:
  virtual ~ControlStore() = default;

  // Another connection to the same store, for another thread.
  virtual std::unique_ptr<ControlStore> connect() const = 0;

  // Appends `value` to roster `roster`. Returns the entry's position (1: the roster's first) where
  // the store learns it with the append, else nullopt.
  virtual std::optional<RosterCursor> append(const std::string& roster,
                                             const std::string& value) = 0;
  // The entries of `roster` past `cursor`, oldest first, at most `limit`; moves `cursor` past
  // them.
  virtual std::vector<std::string> read(const std::string& roster, RosterCursor& cursor,
                                        std::size_t limit) = 0;
  // Waits until `roster` has an entry past `cursor`, at most `timeout`; false when none came.
  virtual bool wait(const std::string& roster, RosterCursor cursor,
                    std::chrono::milliseconds timeout) = 0;

  // Cells: `put` replaces the value; `get` returns each key's value (nullopt: absent), in one
  // request where the store can.
  virtual void put(const std::string& key, const std::string& value) = 0;
  virtual std::vector<std::optional<std::string>> get(const std::vector<std::string>& keys) = 0;
  // Atomically: when `key` holds `expected` (nullopt: absent), makes it hold `desired` (nullopt:
  // removes it). True when it did.
  virtual bool swap(const std::string& key, const std::optional<std::string>& expected,
                    const std::optional<std::string>& desired) = 0;
  // Removes every key whose name starts with `prefix` (a store that outlives its launchers);
  // nothing where the store ends with the job.
  virtual void erase(const std::string& prefix) = 0;

  // True when the store outlives the launchers that use it (etcd), so that a crashed run's
  // records may still be there when the next run of the same job id starts.
  virtual bool outlives_launchers() const = 0;
  // The lowest node rank this launcher may take when none is given: 1 where a launcher that
  // hosts the store is node 0 (the TCP store), else 0.
  virtual int first_free_rank() const = 0;
  // True when the store ends with this launcher (node 0 hosting the TCP store): it stays until
  // the others said goodbye.
  virtual bool hosted_here() const = 0;
  // "node 0's control store at 10.0.0.1:29500", "etcd at h1:2379, h2:2379 (keys /ddl/job/)".
  virtual std::string where() const = 0;
};

// The stores (each a short file of its own):
//
// Node 0's TCP store (tcp_control_store.cpp): node 0's launcher hosts a TcpStoreServer (the
// worker store's code, admitting holders of the job's secret or of a munge credential) and every
// launcher, node 0's included, connects to it, retrying until the rendezvous deadline. The job
// lives as long as node 0 does (as torchrun's c10d rendezvous). A roster is a ticket counter
// "<roster>/n" and one key per entry "<roster>/<ticket>", read incrementally. Under
// kAutoNodeRank the launcher that can host the store at the endpoint (its address is this
// machine's and the port is free: the first one there) becomes node 0 (`options.node_rank` is set
// to 0). Throws ControlError; for a node that finds no store at node 0's address, one that says
// node 0's rendezvous deadline may have passed or the job started or ended without it.
std::unique_ptr<ControlStore> make_tcp_control_store(ControlOptions& options);

// etcd v3 (--rdzv_backend=etcd|etcd-v2, --master=etcd://...; etcd_control_store.cpp): no
// launcher is special, so the job outlives any node, node 0 included. Every name lives under
// "/ddl/<job id>/". A roster entry is a key "<roster>/<writer>.<n>" ordered by its create
// revision (etcd's one order of writes, the same for every reader), so a cursor is a revision and
// a wait is a watch from the next one. Reaches the cluster, retrying until the rendezvous
// deadline (a ControlError naming every endpoint tried when none answered), over TLS and with
// etcd's authentication as options.etcd_security says. Refuses munge admission (the launchers of
// an etcd job share DDL_JOB_SECRET instead).
std::unique_ptr<ControlStore> make_etcd_control_store(const ControlOptions& options);

// Memory (memory_control_store.cpp): every launcher of a test's job is a thread of one process
// with a store over the same state, so the engine's tests run every case (and every forged or
// deleted record) in milliseconds, against the rules the TCP and etcd stores run. Tests may write
// to the state directly, as a stranger would.
struct MemoryControlState {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<std::string>> rosters;
  std::map<std::string, std::string> cells;
  bool outlives_launchers = true;
};
std::unique_ptr<ControlStore> make_memory_control_store(std::shared_ptr<MemoryControlState> state);

}  // namespace ddl::launcher
