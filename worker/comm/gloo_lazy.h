// Internal to ddl_gloo (not installed): the Gloo context a GlooMesh runs on. It connects a rank
// at start only to the peers Gloo's collectives reach (ring neighbours r+-1 and the dissemination
// barrier's and binomial broadcast's r+-2^k, mod the size) and to every other peer on first use.
//
// How a lazy pair comes up (rank a needs rank b; keys under the mesh's store prefix):
//   - a creates its pair for b (which listens on its own port), publishes the address as
//     "lazy/addr/a/b", takes a request number n = add("lazy/req/b/count", 1) and sets
//     "lazy/req/b/n" to "a"; then it reads "lazy/addr/b/a" and connects.
//   - b's agent thread reads b's requests in order with its own store handle. For request "a" it
//     creates b's pair for a (unless b's main thread or an earlier request already did), publishes
//     "lazy/addr/b/a", reads "lazy/addr/a/b" and connects. Neither side ever waits for the other's
//     main thread, so b may be busy in any call while a connects to it.
// One small state per peer (none / connecting / connected / failed) under its own mutex decides
// who creates the pair, so the main thread and the agent never create the same pair twice and a
// slow connection to one peer holds up no other peer's.
//
// Gloo's algorithms and unbound buffers reach a pair through the transport context's pair
// vector, with no hook to make a missing one (the natural hook, a tcp::Context subclass
// overriding the virtual getPair(), cannot be built against Debian's libgloo-dev: its
// tcp/context.h and tcp/pair.h include gloo/common/memory.h, which the package does not ship).
// So the vector is filled ahead of use instead: the eager pairs at connect, and a lazy pair by
// ensure(peer), which GlooMesh calls before every point-to-point call. Every collective GlooMesh
// runs (ring all-reduce and all-gather, dissemination barrier, binomial broadcast from any
// root, the two-rank paths) reaches only eager peers; a collective that reaches others must
// ensure() them first, else Gloo finds no pair there. GlooMesh never posts a receive from
// several ranks (Gloo's recvFromAny would read pairs that may not exist).
//
// Threads: the agent writes a peer's element of the vector only while that peer's state says
// connecting, and the main thread reads an element only after ensure() saw it connected (under
// the peer's mutex), so the two never touch one element at once. Gloo itself reads every element
// only when a wait times out (to close all pairs; the mesh is broken then) and at destruction,
// after the agent has stopped.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace ddl::gloo_lazy {

struct Options {
  int rank = 0;
  int size = 1;
  std::string host = "127.0.0.1";
  std::chrono::milliseconds timeout{60'000};
  // Prefix of this mesh's keys in the store.
  std::string store_prefix = "gloo";
  // " in group 'G' (job rank J)" for a group mesh, else empty: goes into every message.
  std::string group_text;
};

// The peers a rank connects to at start: r+-1 and r+-2^k (2^k < size), mod size, without r
// itself, ascending. Symmetric (b is in eager_peers(a) exactly when a is in eager_peers(b)), so
// both ends of every eager pair agree without asking.
std::vector<int> eager_peers(int rank, int size);

class LazyPairs;

// A gloo::Context over one TCP device whose transport context connects lazily. Not copyable;
// destroying it stops the agent thread (within about a second, also when the store is gone) and
// closes every pair.
class MeshContext : public gloo::Context {
 public:
  // Creates the eager pairs, publishes their addresses under one key, reads the eager peers'
  // keys with one multi_get and connects. Keeps two clones of `store` (one for this rank's
  // requests, one for its agent), so `store` itself need outlive only this call, unless its
  // clones depend on it (MemoryStore, PrefixStore over one): then it must outlive the context.
  // Throws StoreError for a failed rendezvous and gloo exceptions for a failed connect.
  static std::shared_ptr<MeshContext> connect(Store& store, const Options& options);
  ~MeshContext() override;
  MeshContext(const MeshContext&) = delete;
  MeshContext& operator=(const MeshContext&) = delete;

  // Returns once this rank holds a connected pair with `peer` (at once for an eager peer or one
  // connected before; else through the protocol above). Main thread only. Throws
  // gloo::IoException naming both ranks when the connection fails or `timeout` passes; a peer
  // that failed once fails again at once.
  void ensure(int peer);

  // The peers this rank holds a connected pair with (eager and lazy).
  int connected_peers() const;

 private:
  MeshContext(int rank, int size);
  std::unique_ptr<LazyPairs> pairs_;
};

}  // namespace ddl::gloo_lazy
