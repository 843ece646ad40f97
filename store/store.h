// Key-value store used by the workers of one job to find each other (rendezvous) and to exchange
// small blobs such as communicator addresses and the NCCL unique id.
//
// One interface, two implementations: `TcpStore` (store/tcp_store.h; rank 0 hosts the server,
// every rank is a client) and `MemoryStore` (store/memory_store.h; one process, for tests and for
// a world of one). The same test suite runs against both. `PrefixStore` (store/prefix_store.h)
// gives one user of a store its own key space.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/error.h"

namespace ddl {

using Bytes = std::vector<char>;

// Any store failure: lost connection, refused handshake, protocol error. The message names the
// endpoint, the key and what was expected.
// A program ends with kExitParallel for it ("rendezvous store: ...").
class StoreError : public Error {
 public:
  explicit StoreError(const std::string& what) : StoreError(kExitParallel, what) {}

 protected:
  StoreError(int exit_code, const std::string& what) : Error(exit_code, "rendezvous store", what) {}
};

// A wait that reached its deadline. The message names the keys still missing. A program ends
// with kExitDeadline for it, so the launcher dumps the stacks of the ranks still running.
class StoreTimeout : public StoreError {
 public:
  explicit StoreTimeout(const std::string& what) : StoreError(kExitDeadline, what) {}
};

// A client found no store at its endpoint by its connect deadline (nothing listening there).
class StoreUnreachable : public StoreError {
 public:
  using StoreError::StoreError;
};

class Store {
 public:
  // Used where a caller gives no timeout of its own.
  static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};

  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value, and wakes every waiter on `key`.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  // Throws StoreTimeout when it is not set in time.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  // Atomically adds `delta` to the integer stored at `key` (absent counts as 0) and returns the
  // new value. The value is stored as decimal text, so `get` on it reads e.g. "3".
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // Returns true if every key in `keys` is set, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Waits until every key in `keys` is set. Throws StoreTimeout naming the missing keys when the
  // deadline passes first.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Like wait(), for callers that poll: returns true once every key is set, false when `timeout`
  // passes first (never StoreTimeout). Other failures (a lost connection) still throw StoreError.
  virtual bool wait_for(const std::vector<std::string>& keys,
                        std::chrono::milliseconds timeout) = 0;

  // Atomically: when `key` holds `expected` (nullopt: when `key` is absent), sets it to `desired`
  // and wakes its waiters. Returns what `key` holds after the call (nullopt: absent), so the caller
  // won the race exactly when the result equals `desired` and the key did not hold it before.
  virtual std::optional<Bytes> compare_set(const std::string& key,
                                           const std::optional<Bytes>& expected,
                                           const Bytes& desired) = 0;

  // Removes `key`; returns whether it was set. Waiters on it keep waiting for a new value.
  virtual bool delete_key(const std::string& key) = 0;

  // Batched operations: what a loop of set() / get() does, in one request where the store can
  // (TcpStore: one frame each way), so a rank reading its peers' addresses costs one round trip,
  // not one per peer. The defaults loop over the single-key calls.
  //
  // Sets keys[i] to values[i] (both the same length, else StoreError) and wakes their waiters.
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values);
  // The values of `keys`, in order, waiting up to `timeout` (one deadline for all) until every
  // one is set. Throws StoreTimeout naming the keys still missing.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout);

  // An independent handle on the same store that may block in a wait while this one keeps
  // working (TcpStore: a second connection with the same options; MemoryStore: a view of the
  // same data). The store this one was cloned from must outlive it where it does not own its
  // data (MemoryStore, PrefixStore). Throws StoreError where the store cannot make one.
  virtual std::unique_ptr<Store> clone();
};

// Blocks until all `world_size` ranks have called barrier() with the same `name`, or throws
// StoreTimeout naming the ranks that did not arrive within `timeout`. Each distinct barrier in a
// job needs a distinct `name` (e.g. "init", "epoch/3"), and each rank enters it once. Costs
// three store requests per rank whatever `world_size` (store/store.cpp).
void barrier(Store& store, const std::string& name, int rank, int world_size,
             std::chrono::milliseconds timeout);

}  // namespace ddl
