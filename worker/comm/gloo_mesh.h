// Gloo's full mesh over TCP with collectives on plain buffers: no LibTorch. GlooCommunicator
// (worker/comm/gloo_communicator.h) runs tensors through it; a worker that has no tensors
// (bench/startup_worker) uses it directly and never loads LibTorch.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "store/store.h"
#include "worker/comm/comm_error.h"
#include "worker/comm/rank_group.h"

namespace ddl {

enum class DType { kFloat32, kFloat64, kInt32, kInt64 };

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Address of this rank's own interface; Gloo's TCP transport listens there on an ephemeral port
  // and publishes its address through the store.
  std::string host = "127.0.0.1";
  // Bounds every Gloo operation and every connection: a dead peer surfaces as a CommError after
  // at most this long instead of a hang.
  std::chrono::milliseconds timeout{60'000};
  // Prefix of the keys this mesh uses in the store (a job may build several).
  std::string store_prefix = "gloo";
};

// Not thread-safe: one thread issues the collectives and the point-to-point calls; collectives run
// in the same order on every rank. Every call throws CommError ("gloo <op> on rank R of N: ...",
// plus the group and job rank for a group mesh) on a failure or after the timeout. After a
// CommError from the transport (a dead peer, a timeout) the mesh is broken: destroy it. Connecting
// sets SIGPIPE to ignored when the process left it at its default, so a write to a dead peer is
// that CommError and not a kill by SIGPIPE.
//
// Tags. Every message Gloo moves is matched by a 64-bit slot on the pair of the two ranks: bits
// 56..63 a prefix, bits 24..55 a 32-bit tag, bits 0..23 an offset the algorithm adds.
//   - Collectives take the tag from one counter per mesh, advanced by every collective on every
//     rank alike, under Gloo's own prefixes (0x01..0x08; our two-rank all-reduce paths use Gloo's
//     all-reduce prefix).
//   - Point-to-point messages use prefix kP2pSlotPrefix, which no collective uses, and their own
//     counters, one per peer and direction: the tag of the n-th message from rank s to rank d is
//     2 * n + (s < d ? 0 : 1) (mod 2^32), so the two directions of a pair never share a slot.
//     Offset 0 is the message's header (its byte count and element type), offset 1 its payload.
//   So point-to-point calls between some ranks leave the collective counter alone and the two
//   interleave freely, as long as each rank issues its calls in an order that can complete.
class GlooMesh {
 public:
  // The slot prefix of point-to-point messages (see "Tags" above).
  static constexpr unsigned kP2pSlotPrefix = 0x50;

  // Connects this rank through `store` to the peers the collectives reach first: its ring
  // neighbours r+-1 and r+-2^k (mod size), which the barrier and the broadcast use; O(log size)
  // pairs, one key published and one multi_get. Any other peer is connected on first use (a
  // point-to-point call to it) without the peer's main thread taking part: each mesh runs an
  // agent thread that answers connection requests through the store. The mesh keeps two clones
  // of `store` for that (store.clone()); `store` must outlive this call only unless its clones
  // depend on it (MemoryStore, a PrefixStore over one), and then it must outlive the mesh.
  // Connected pairs keep working once the store is gone (rank 0 hosts it); a first use of an
  // unconnected peer then throws CommError. A world of one opens no sockets and every
  // collective is local.
  static std::unique_ptr<GlooMesh> connect(Store& store, const GlooOptions& options);

  // Builds a mesh over the members of `group` only (worker/comm/rank_group.h). `options.rank`
  // and `options.world_size` are the job's; `options.store_prefix` is the job prefix the group's
  // keys go under. Only members call this, each once. The mesh's rank() and size() are the group
  // rank and size, and every rank argument of its calls is a group rank. Throws CommError for a
  // bad rank list (see place_in_group), a reused group label (see claim_group) or a failed
  // connect.
  static std::unique_ptr<GlooMesh> connect_group(Store& store, const GlooOptions& options,
                                                 const RankGroup& group);
  // Stops the agent (within about a second, also when the store is gone) and closes the pairs.
  ~GlooMesh();
  GlooMesh(const GlooMesh&) = delete;
  GlooMesh& operator=(const GlooMesh&) = delete;

  int rank() const;
  int size() const;
  // The peers this rank has a connected pair with now (eager ones and lazy ones made so far).
  int connected_peers() const;

  // In place: every rank ends with the element-wise sum of all ranks' `count` elements, bit for
  // bit the same on every rank.
  void all_reduce_sum(void* data, std::size_t count, DType dtype);
  // In place: every rank ends with `root`'s `bytes` bytes.
  void broadcast(void* data, std::size_t bytes, int root);
  // `output` (size() * bytes) receives rank r's `input` at offset r * bytes.
  void all_gather(const void* input, std::size_t bytes, void* output);
  // Returns once every rank has entered the barrier.
  void barrier();

  // Point to point. send() returns once the `bytes` bytes at `data` have been handed to the
  // transport, which Gloo's TCP transport does only after `dst` posted the matching recv (so a
  // send waits for it, and `data` may be reused on return); recv() once `bytes` bytes from `src`
  // are in `data`. Messages from one rank to another arrive in the order they were sent. Both
  // throw CommError, before anything moves, when the peer is this rank or not a rank, and when
  // the peer dies or the mesh timeout passes (one deadline for the whole call). recv also throws
  // when the message `src` sent has another size or was sent with an element type (`data` is
  // then left untouched, the message is consumed and the mesh stays usable).
  void send(const void* data, std::size_t bytes, int dst);
  void recv(void* data, std::size_t bytes, int src);
  // The same for `count` elements of `dtype`; the element type travels with the message, so
  // recv() also throws when `src` sent another type.
  void send(const void* data, std::size_t count, DType dtype, int dst);
  void recv(void* data, std::size_t count, DType dtype, int src);

 private:
  struct Impl;
  explicit GlooMesh(std::unique_ptr<Impl> impl);
  // Connects with `options` already checked; `group_text` goes into every error message.
  static std::unique_ptr<GlooMesh> connect_mesh(Store& store, const GlooOptions& options,
                                                const std::string& group_text);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddl
