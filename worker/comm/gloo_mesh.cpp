// Gloo mesh: our Store adapted to Gloo's rendezvous, a TCP device on the rank's own address, and
// Gloo's option-based collectives (the entry points PyTorch's ProcessGroupGloo uses), run in place
// on the caller's thread with the mesh timeout bounding every wait. Two-rank all-reduces take our
// own paths (one exchange when small, pipelined halves when large).
#include "worker/comm/gloo_mesh.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <utility>
#include <vector>

namespace ddl {
namespace {

// Gloo's rendezvous store on top of ours. Gloo calls get() without a timeout and expects it to
// wait for the key, so every call is bounded by the mesh timeout; keys are prefixed so several
// meshes (or generations) can share one store.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(ddl::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(full_key(key), data);
  }

  std::vector<char> get(const std::string& key) override {
    return store_.get(full_key(key), timeout_);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& key : keys) full.push_back(full_key(key));
    // Gloo passes its kNoTimeout (zero) to mean "no limit"; we never wait without one.
    store_.wait(full, timeout.count() > 0 ? timeout : timeout_);
  }

 private:
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }

  ddl::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

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

}  // namespace

struct GlooMesh::Impl {
  std::shared_ptr<gloo::Context> context;  // null for a world of one
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  std::uint32_t tag = 0;
  std::vector<char> scratch;  // the peer's share in the two-rank paths

  std::uint32_t next_tag() { return tag++; }

  std::string where(const char* op) const {
    std::ostringstream s;
    s << "gloo " << op << " on rank " << rank << " of " << size << ": ";
    return s.str();
  }

  // Runs one Gloo call, turning whatever Gloo throws into a CommError with our context.
  template <typename F>
  void guarded(const char* op, F&& body) {
    try {
      body();
    } catch (const gloo::IoException& e) {
      throw CommError(where(op) + e.what());
    } catch (const gloo::EnforceNotMet& e) {
      throw CommError(where(op) + e.what());
    } catch (const gloo::Exception& e) {
      throw CommError(where(op) + e.what());
    }
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

void GlooMesh::barrier() {
  if (impl_->size == 1) return;
  impl_->guarded("barrier", [&] {
    gloo::BarrierOptions opts(impl_->context);
    opts.setTag(impl_->next_tag());
    opts.setTimeout(impl_->timeout);
    gloo::barrier(opts);
  });
}

std::unique_ptr<GlooMesh> GlooMesh::connect(Store& store, const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw CommError("gloo: rank " + std::to_string(options.rank) + " is not within world size " +
                    std::to_string(options.world_size));
  }
  if (options.timeout.count() <= 0) {
    throw CommError("gloo: timeout must be positive, got " +
                    std::to_string(options.timeout.count()) + " ms");
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = options.rank;
  impl->size = options.world_size;
  impl->timeout = options.timeout;
  // A world of one has no peers: no device, no sockets, every collective is local.
  if (options.world_size == 1) return std::unique_ptr<GlooMesh>(new GlooMesh(std::move(impl)));

  const std::string where = "gloo connect on rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.world_size) + " (host " + options.host + "): ";
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    GlooStoreAdapter adapter(store, options.store_prefix, options.timeout);
    context->connectFullMesh(adapter, device);
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
