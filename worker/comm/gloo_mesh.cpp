// Gloo mesh: a lazily connected Gloo context (gloo_lazy.h: neighbours at start, everyone else on
// first use) over a TCP device on the rank's own address, and Gloo's option-based collectives (the
// entry points PyTorch's ProcessGroupGloo uses), run in place on the caller's thread with the mesh
// timeout bounding every wait. Two-rank all-reduces take our own paths (one exchange when small,
// pipelined halves when large).
//
// Point to point: each message is a fixed-size header (magic, element type, byte count) and, when
// it has bytes, a payload, both on unbound buffers under the point-to-point slots (the tag layout
// is in gloo_mesh.h). The receiver reads the header first and posts the payload's receive with the
// announced size, into the caller's buffer when it matches and into scratch otherwise, so a
// mismatch is reported without desynchronising the pair.
#include "worker/comm/gloo_mesh.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

#include "worker/comm/gloo_lazy.h"

namespace ddl {
namespace {

// Element-wise sum for Gloo's reduce callback. `out` may alias one input (Gloo reduces in place);
// the restrict-qualified helpers cover each aliasing case so the loops vectorise.
template <typename T>
void add_into(T* __restrict out, const T* __restrict in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
}

template <typename T>
void add_to(T* __restrict out, const T* __restrict a, const T* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void sum_reduce(void* out_v, const void* a_v, const void* b_v, std::size_t n) {
  T* out = static_cast<T*>(out_v);
  const T* a = static_cast<const T*>(a_v);
  const T* b = static_cast<const T*>(b_v);
  if (out == a) {
    add_into(out, b, n);
  } else if (out == b) {
    add_into(out, a, n);
  } else {
    add_to(out, a, b, n);
  }
}

using ReduceFn = void (*)(void*, const void*, const void*, std::size_t);

ReduceFn sum_function(DType type) {
  switch (type) {
    case DType::kFloat32:
      return &sum_reduce<float>;
    case DType::kFloat64:
      return &sum_reduce<double>;
    case DType::kInt32:
      return &sum_reduce<std::int32_t>;
    case DType::kInt64:
      return &sum_reduce<std::int64_t>;
  }
  return nullptr;
}

std::size_t element_size(DType type) {
  switch (type) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
  }
  return 0;
}

// Up to this size a two-rank all-reduce is one exchange of the whole buffer (exchange_sum);
// above it, pipelined halves (halves_sum).
constexpr std::size_t kExchangeMaxBytes = 128u << 10;
// Pieces of the pipelined halves: small enough that summing one overlaps the transfer of the
// next, large enough that per-message costs stay small.
constexpr std::size_t kPieceBytes = 1u << 20;

using Clock = std::chrono::steady_clock;

// The header in front of every point-to-point message.
struct P2pHeader {
  std::uint32_t magic;
  std::uint32_t kind;  // kRawBytes, or 1 + the DType of the elements
  std::uint64_t bytes;
};
constexpr std::uint32_t kP2pMagic = 0x64703270;  // "p2pd"
constexpr std::uint32_t kRawBytes = 0;
constexpr std::uint64_t kHeaderPart = 0;
constexpr std::uint64_t kPayloadPart = 1;

std::uint32_t kind_of(DType dtype) { return 1 + static_cast<std::uint32_t>(dtype); }

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

// "4096 bytes", or "1024 float32 elements (4096 bytes)".
std::string describe_message(std::uint32_t kind, std::uint64_t bytes) {
  const std::string size = std::to_string(bytes) + " bytes";
  if (kind == kRawBytes) return size;
  if (kind > kind_of(DType::kInt64))
    return size + " of unknown element type " + std::to_string(kind);
  const auto dtype = static_cast<DType>(kind - 1);
  const std::uint64_t esize = element_size(dtype);
  return std::to_string(bytes / esize) + " " + dtype_name(dtype) + " elements (" + size + ")";
}

// The tag of the n-th message from `src` to `dst` (see "Tags" in gloo_mesh.h).
std::uint32_t p2p_tag(int src, int dst, std::uint32_t n) { return 2u * n + (src < dst ? 0u : 1u); }

std::uint64_t p2p_slot(std::uint32_t tag, std::uint64_t part) {
  return (static_cast<std::uint64_t>(GlooMesh::kP2pSlotPrefix) << 56) |
         (static_cast<std::uint64_t>(tag) << 24) | part;
}

// What is left of `deadline`, at least a millisecond (Gloo reads zero as "no wait at all" and
// a negative value as "the context's default").
std::chrono::milliseconds left_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

struct GlooMesh::Impl {
  std::shared_ptr<gloo::Context> context;  // null for a world of one
  // The same context: its ensure(peer) connects a point-to-point peer before first use.
  gloo_lazy::MeshContext* lazy = nullptr;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::uint32_t tag = 0;      // the collectives' tag counter
  std::vector<char> scratch;  // the peer's share in the two-rank paths
  // Point-to-point message counters, indexed by peer: messages sent to it, received from it.
  std::vector<std::uint32_t> sent;
  std::vector<std::uint32_t> received;
  std::string group_text;  // " in group 'G' (job rank J)" for a group mesh, else empty

  std::uint32_t next_tag() { return tag++; }

  std::string where(const char* op) const {
    std::ostringstream s;
    s << "gloo " << op << " on rank " << rank << " of " << size << group_text << ": ";
    return s.str();
  }

  // "gloo send on rank 0 of 2 (to rank 1): "
  std::string where_peer(const char* op, const char* direction, int peer) const {
    std::ostringstream s;
    s << "gloo " << op << " on rank " << rank << " of " << size << group_text << " (" << direction
      << " rank " << peer << "): ";
    return s.str();
  }

  // Runs one Gloo call, turning whatever Gloo throws into a CommError with our context.
  template <typename F>
  void guarded_at(const std::string& prefix, F&& body) {
    try {
      body();
    } catch (const gloo::IoException& e) {
      // Gloo's TCP pairs say "Timed out waiting ..." when the deadline passed.
      const std::string what = e.what();
      if (what.find("imed out") != std::string::npos) throw CommTimeout(prefix + what);
      throw CommError(prefix + what);
    } catch (const gloo::EnforceNotMet& e) {
      throw CommError(prefix + e.what());
    } catch (const gloo::Exception& e) {
      throw CommError(prefix + e.what());
    }
  }

  template <typename F>
  void guarded(const char* op, F&& body) {
    guarded_at(where(op), std::forward<F>(body));
  }

  void check_peer(const char* op, const char* direction, int peer) const {
    if (peer == rank) {
      throw CommError(where_peer(op, direction, peer) + "the peer is this rank itself");
    }
    if (peer < 0 || peer >= size) {
      throw CommError(where_peer(op, direction, peer) + "not a rank (expected 0.." +
                      std::to_string(size - 1) + ")");
    }
  }

  static void finished(bool completed, const std::string& prefix, const char* what) {
    // Gloo's waits throw gloo::IoException when the timeout passes; false means aborted.
    if (!completed) throw CommError(prefix + what + " was aborted");
  }

  void p2p_send(const void* data, std::uint64_t bytes, std::uint32_t kind, int dst) {
    check_peer("send", "to", dst);
    const std::string prefix = where_peer("send", "to", dst);
    guarded_at(prefix, [&] {
      const auto deadline = Clock::now() + timeout;
      lazy->ensure(dst);
      const std::uint32_t tag = p2p_tag(rank, dst, sent[dst]++);
      P2pHeader header{kP2pMagic, kind, bytes};
      auto head = context->createUnboundBuffer(&header, sizeof(header));
      head->send(dst, p2p_slot(tag, kHeaderPart));
      std::unique_ptr<gloo::transport::UnboundBuffer> payload;
      if (bytes > 0) {
        // Gloo only reads a buffer it sends, but its API takes a non-const pointer.
        payload = context->createUnboundBuffer(const_cast<void*>(data), bytes);
        payload->send(dst, p2p_slot(tag, kPayloadPart));
      }
      finished(head->waitSend(left_until(deadline)), prefix, "sending the header");
      if (payload) finished(payload->waitSend(left_until(deadline)), prefix, "sending the payload");
    });
  }

  void p2p_recv(void* data, std::uint64_t bytes, std::uint32_t kind, int src) {
    check_peer("recv", "from", src);
    const std::string prefix = where_peer("recv", "from", src);
    guarded_at(prefix, [&] {
      const auto deadline = Clock::now() + timeout;
      lazy->ensure(src);
      const std::uint32_t tag = p2p_tag(src, rank, received[src]++);
      P2pHeader header{0, 0, 0};
      auto head = context->createUnboundBuffer(&header, sizeof(header));
      head->recv(src, p2p_slot(tag, kHeaderPart));
      finished(head->waitRecv(left_until(deadline)), prefix, "receiving the header");
      if (header.magic != kP2pMagic) {
        throw CommError(prefix + "the message header is corrupt (magic " +
                        std::to_string(header.magic) + ", expected " + std::to_string(kP2pMagic) +
                        ")");
      }
      const bool matches = header.bytes == bytes && header.kind == kind;
      std::vector<char> discard;
      void* into = data;
      if (!matches) {
        discard.resize(header.bytes);
        into = discard.data();
      }
      if (header.bytes > 0) {
        auto payload = context->createUnboundBuffer(into, header.bytes);
        payload->recv(src, p2p_slot(tag, kPayloadPart));
        finished(payload->waitRecv(left_until(deadline)), prefix, "receiving the payload");
      }
      if (!matches) {
        throw CommError(prefix + "rank " + std::to_string(src) + " sent " +
                        describe_message(header.kind, header.bytes) + ", expected " +
                        describe_message(kind, bytes) + " (the message was discarded)");
      }
    });
  }

  void expect(bool completed, const char* what) const {
    // Gloo's waits throw gloo::IoException when the timeout passes; false means aborted.
    if (!completed) {
      throw CommError(where("all_reduce") + what + " with rank " + std::to_string(1 - rank) +
                      " was aborted");
    }
  }

  // Two ranks, small buffer: each rank sends its whole buffer and sums what it receives, one
  // round trip instead of the ring's reduce-scatter and all-gather hops. Both ranks compute
  // mine + theirs, and IEEE addition is commutative, so they end with identical bits.
  void exchange_sum(void* data, std::size_t count, DType dtype) {
    const std::size_t bytes = count * element_size(dtype);
    if (scratch.size() < bytes) scratch.resize(bytes);
    const int peer = 1 - rank;
    const std::uint64_t slot = gloo::Slot::build(gloo::kAllreduceSlotPrefix, next_tag());
    auto theirs = context->createUnboundBuffer(scratch.data(), bytes);
    auto mine = context->createUnboundBuffer(data, bytes);
    theirs->recv(peer, slot, 0, bytes);
    mine->send(peer, slot, 0, bytes);
    expect(theirs->waitRecv(timeout), "the exchange");
    expect(mine->waitSend(timeout), "the exchange");
    sum_function(dtype)(data, data, scratch.data(), count);
  }

  // Two ranks, large buffer: rank 0 owns the first half, rank 1 the second. Each rank sends its
  // copy of the peer's half piece by piece, sums every piece of its own half as it arrives and
  // sends the summed piece straight back; the peer's summed pieces land in place. Every byte
  // crosses the wire twice (like the ring) and summing overlaps the transfers. The peer writes
  // its summed piece k over our copy of it only after it received that copy in full, so our
  // send of it has finished by then. One rank computes each sum, so both end bit-identical.
  void halves_sum(void* data, std::size_t count, DType dtype) {
    const std::size_t esize = element_size(dtype);
    const int peer = 1 - rank;
    const std::size_t first = count / 2;
    const std::size_t own_begin = rank == 0 ? 0 : first;
    const std::size_t own_count = rank == 0 ? first : count - first;
    const std::size_t peer_begin = rank == 0 ? first : 0;
    const std::size_t peer_count = count - own_count;
    const std::size_t piece = std::max<std::size_t>(kPieceBytes / esize, 1);
    if (scratch.size() < own_count * esize) scratch.resize(own_count * esize);

    char* base = static_cast<char*>(data);
    const std::uint64_t scatter_slot = gloo::Slot::build(gloo::kAllreduceSlotPrefix, next_tag());
    const std::uint64_t gather_slot = gloo::Slot::build(gloo::kAllreduceSlotPrefix, next_tag());
    auto whole = context->createUnboundBuffer(data, count * esize);

    // The peer's copies of our pieces, one buffer each so each can be waited for on its own.
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> incoming;
    for (std::size_t at = 0; at < own_count; at += piece) {
      const std::size_t n = std::min(piece, own_count - at);
      incoming.push_back(context->createUnboundBuffer(scratch.data() + at * esize, n * esize));
      incoming.back()->recv(peer, scatter_slot, 0, n * esize);
    }
    std::size_t gathers = 0;
    for (std::size_t at = 0; at < peer_count; at += piece, ++gathers) {
      const std::size_t n = std::min(piece, peer_count - at);
      whole->recv(peer, gather_slot, (peer_begin + at) * esize, n * esize);
    }
    std::size_t sends = 0;
    for (std::size_t at = 0; at < peer_count; at += piece, ++sends) {
      const std::size_t n = std::min(piece, peer_count - at);
      whole->send(peer, scatter_slot, (peer_begin + at) * esize, n * esize);
    }
    const ReduceFn sum = sum_function(dtype);
    std::size_t k = 0;
    for (std::size_t at = 0; at < own_count; at += piece, ++k, ++sends) {
      const std::size_t n = std::min(piece, own_count - at);
      expect(incoming[k]->waitRecv(timeout), "the reduce-scatter");
      char* own = base + (own_begin + at) * esize;
      sum(own, own, scratch.data() + at * esize, n);
      whole->send(peer, gather_slot, (own_begin + at) * esize, n * esize);
    }
    for (std::size_t i = 0; i < gathers; ++i) expect(whole->waitRecv(timeout), "the all-gather");
    for (std::size_t i = 0; i < sends; ++i) expect(whole->waitSend(timeout), "a send");
  }

  void ring_sum(void* data, std::size_t count, DType dtype) {
    gloo::AllreduceOptions opts(context);
    opts.setTag(next_tag());
    opts.setTimeout(timeout);
    switch (dtype) {
      case DType::kFloat32:
        opts.setOutput(static_cast<float*>(data), count);
        break;
      case DType::kFloat64:
        opts.setOutput(static_cast<double*>(data), count);
        break;
      case DType::kInt32:
        opts.setOutput(static_cast<std::int32_t*>(data), count);
        break;
      case DType::kInt64:
        opts.setOutput(static_cast<std::int64_t*>(data), count);
        break;
    }
    opts.setReduceFunction(sum_function(dtype));
    gloo::allreduce(opts);
  }
};

GlooMesh::GlooMesh(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooMesh::~GlooMesh() = default;

int GlooMesh::rank() const { return impl_->rank; }
int GlooMesh::size() const { return impl_->size; }
int GlooMesh::connected_peers() const { return impl_->lazy ? impl_->lazy->connected_peers() : 0; }

void GlooMesh::all_reduce_sum(void* data, std::size_t count, DType dtype) {
  if (impl_->size == 1 || count == 0) return;
  impl_->guarded("all_reduce", [&] {
    const std::size_t bytes = count * element_size(dtype);
    if (impl_->size == 2 && bytes <= kExchangeMaxBytes) {
      impl_->exchange_sum(data, count, dtype);
    } else if (impl_->size == 2) {
      impl_->halves_sum(data, count, dtype);
    } else {
      impl_->ring_sum(data, count, dtype);
    }
  });
}

void GlooMesh::broadcast(void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= impl_->size) {
    throw CommError(impl_->where("broadcast") + "root " + std::to_string(root) +
                    " is not a rank (world size " + std::to_string(impl_->size) + ")");
  }
  if (impl_->size == 1 || bytes == 0) return;
  impl_->guarded("broadcast", [&] {
    gloo::BroadcastOptions opts(impl_->context);
    opts.setTag(impl_->next_tag());
    opts.setTimeout(impl_->timeout);
    opts.setRoot(root);
    opts.setOutput(static_cast<char*>(data), bytes);
    gloo::broadcast(opts);
  });
}

void GlooMesh::all_gather(const void* input, std::size_t bytes, void* output) {
  if (impl_->size == 1) {
    std::copy_n(static_cast<const char*>(input), bytes, static_cast<char*>(output));
    return;
  }
  if (bytes == 0) return;
  impl_->guarded("all_gather", [&] {
    gloo::AllgatherOptions opts(impl_->context);
    opts.setTag(impl_->next_tag());
    opts.setTimeout(impl_->timeout);
    // Gloo's input buffer is only read, but its API takes a non-const pointer.
    opts.setInput(static_cast<char*>(const_cast<void*>(input)), bytes);
    opts.setOutput(static_cast<char*>(output), bytes * impl_->size);
    gloo::allgather(opts);
  });
}

void GlooMesh::send(const void* data, std::size_t bytes, int dst) {
  impl_->p2p_send(data, bytes, kRawBytes, dst);
}

void GlooMesh::recv(void* data, std::size_t bytes, int src) {
  impl_->p2p_recv(data, bytes, kRawBytes, src);
}

void GlooMesh::send(const void* data, std::size_t count, DType dtype, int dst) {
  impl_->p2p_send(data, count * element_size(dtype), kind_of(dtype), dst);
}

void GlooMesh::recv(void* data, std::size_t count, DType dtype, int src) {
  impl_->p2p_recv(data, count * element_size(dtype), kind_of(dtype), src);
}

void GlooMesh::barrier() {
  if (impl_->size == 1) return;
  impl_->guarded("barrier", [&] {
    gloo::BarrierOptions opts(impl_->context);
    opts.setTag(impl_->next_tag());
    opts.setTimeout(impl_->timeout);
    gloo::barrier(opts);
  });
}

namespace {

void check_options(const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw CommError("gloo: rank " + std::to_string(options.rank) + " is not within world size " +
                    std::to_string(options.world_size));
  }
  if (options.timeout.count() <= 0) {
    throw CommError("gloo: timeout must be positive, got " +
                    std::to_string(options.timeout.count()) + " ms");
  }
}

// Gloo writes to its peers' sockets without MSG_NOSIGNAL: once a peer has died, a write can raise
// SIGPIPE, whose default action kills this process before Gloo reports the error. A dead peer must
// be a CommError naming it (as it is in Python programs, which start with SIGPIPE ignored), so a
// process that left SIGPIPE at its default gets it ignored. A program's own choice is kept.
void ignore_default_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

std::unique_ptr<GlooMesh> GlooMesh::connect(Store& store, const GlooOptions& options) {
  check_options(options);
  ignore_default_sigpipe();
  return connect_mesh(store, options, "");
}

std::unique_ptr<GlooMesh> GlooMesh::connect_group(Store& store, const GlooOptions& options,
                                                  const RankGroup& group) {
  check_options(options);
  ignore_default_sigpipe();
  const GroupPlace place =
      place_in_group("gloo", options.rank, options.world_size, group, options.store_prefix);
  claim_group(store, place, "gloo", options.timeout);
  GlooOptions inner = options;
  inner.rank = place.rank;
  inner.world_size = place.size;
  inner.store_prefix = place.store_prefix;
  return connect_mesh(
      store, inner,
      " in group '" + place.label + "' (job rank " + std::to_string(place.job_rank) + ")");
}

std::unique_ptr<GlooMesh> GlooMesh::connect_mesh(Store& store, const GlooOptions& options,
                                                 const std::string& group_text) {
  auto impl = std::make_unique<Impl>();
  impl->rank = options.rank;
  impl->size = options.world_size;
  impl->timeout = options.timeout;
  impl->sent.assign(static_cast<std::size_t>(options.world_size), 0);
  impl->received.assign(static_cast<std::size_t>(options.world_size), 0);
  impl->group_text = group_text;
  // A world of one has no peers: no device, no sockets, every collective is local.
  if (options.world_size == 1) return std::unique_ptr<GlooMesh>(new GlooMesh(std::move(impl)));

  const std::string where = "gloo connect on rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.world_size) + group_text + " (host " +
                            options.host + "): ";
  try {
    gloo_lazy::Options lazy;
    lazy.rank = options.rank;
    lazy.size = options.world_size;
    lazy.host = options.host;
    lazy.timeout = options.timeout;
    lazy.store_prefix = options.store_prefix;
    lazy.group_text = group_text;
    auto context = gloo_lazy::MeshContext::connect(store, lazy);
    impl->lazy = context.get();
    impl->context = std::move(context);
  } catch (const StoreError& e) {
    throw CommError(where + "rendezvous through the store failed: " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw CommError(where + e.what());
  } catch (const gloo::Exception& e) {
    throw CommError(where + e.what());
  }
  return std::unique_ptr<GlooMesh>(new GlooMesh(std::move(impl)));
}

}  // namespace ddl
