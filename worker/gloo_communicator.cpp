// Gloo communicator: our Store adapted to Gloo's rendezvous, a TCP device on the rank's own
// address, and Gloo's option-based collectives (the same entry points PyTorch's ProcessGroupGloo
// uses), run in place on the caller's thread with the context timeout bounding every wait.
#include "worker/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <sstream>
#include <utility>
#include <vector>

namespace ddl {
namespace {

// Gloo's rendezvous store on top of ours. Gloo calls get() without a timeout and expects it to
// wait for the key, so every call is bounded by the communicator's timeout; keys are prefixed so
// several communicators (or generations) can share one store.
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

using ReduceFn = void (*)(void*, const void*, const void*, std::size_t);

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

// Up to this size a two-rank all-reduce is one exchange of the whole tensor (see exchange_sum);
// above it Gloo's ring, whose reduce-scatter halves the bytes each rank sums and pipelines the
// summing with the transfer.
constexpr std::size_t kExchangeMaxBytes = 128u << 10;

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, const GlooOptions& options)
      : context_(std::move(context)),
        rank_(options.rank),
        size_(options.world_size),
        timeout_(options.timeout) {}

  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    check_tensor("all_reduce", tensor);
    if (size_ > 1 && tensor.numel() > 0) {
      guarded("all_reduce", [&] {
        const auto n = static_cast<std::size_t>(tensor.numel());
        if (size_ == 2 && tensor.nbytes() <= kExchangeMaxBytes) {
          exchange_sum(tensor, n);
          return;
        }
        gloo::AllreduceOptions opts(context_);
        opts.setTag(next_tag());
        opts.setTimeout(timeout_);
        switch (tensor.scalar_type()) {
          case torch::kFloat:
            set_sum<float>(opts, tensor, n);
            break;
          case torch::kDouble:
            set_sum<double>(opts, tensor, n);
            break;
          case torch::kInt:
            set_sum<std::int32_t>(opts, tensor, n);
            break;
          case torch::kLong:
            set_sum<std::int64_t>(opts, tensor, n);
            break;
          default:
            break;  // check_tensor refused it
        }
        gloo::allreduce(opts);
      });
    }
    if (op == ReduceOp::kAverage && size_ > 1) {
      // Integer averages truncate toward zero, like C++ integer division.
      if (tensor.is_floating_point()) {
        tensor.div_(size_);
      } else {
        tensor.div_(size_, "trunc");
      }
    }
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    check_tensor("broadcast", tensor);
    check_root("broadcast", root);
    if (size_ == 1 || tensor.numel() == 0) return;
    guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      opts.setRoot(root);
      opts.setOutput(static_cast<char*>(tensor.data_ptr()), tensor.nbytes());
      gloo::broadcast(opts);
    });
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    check_tensor("all_gather", tensor);
    std::vector<int64_t> shape{size_};
    for (auto d : tensor.sizes()) shape.push_back(d);
    torch::Tensor out = torch::empty(shape, tensor.options());
    if (size_ == 1) {
      out[0].copy_(tensor);
    } else if (tensor.numel() > 0) {
      guarded("all_gather", [&] {
        gloo::AllgatherOptions opts(context_);
        opts.setTag(next_tag());
        opts.setTimeout(timeout_);
        // Gloo's input buffer is only read, but its API takes a non-const pointer.
        opts.setInput(static_cast<char*>(const_cast<void*>(tensor.data_ptr())), tensor.nbytes());
        opts.setOutput(static_cast<char*>(out.data_ptr()), out.nbytes());
        gloo::allgather(opts);
      });
    }
    return out.unbind(0);
  }

  void barrier() override {
    if (size_ == 1) return;
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  static ReduceFn sum_function(torch::ScalarType type) {
    switch (type) {
      case torch::kFloat:
        return &sum_reduce<float>;
      case torch::kDouble:
        return &sum_reduce<double>;
      case torch::kInt:
        return &sum_reduce<std::int32_t>;
      case torch::kLong:
        return &sum_reduce<std::int64_t>;
      default:
        throw CommError("gloo: no sum for dtype " + std::string(c10::toString(type)));
    }
  }

  // Two ranks, small tensor: each rank sends its whole tensor and sums what it receives, one
  // round trip instead of the ring's reduce-scatter and all-gather hops. Both ranks compute
  // mine + theirs, and IEEE addition is commutative, so they end with identical bits.
  void exchange_sum(torch::Tensor& tensor, std::size_t n) {
    const std::size_t bytes = tensor.nbytes();
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    const int peer = 1 - rank_;
    const std::uint64_t slot = gloo::Slot::build(gloo::kAllreduceSlotPrefix, next_tag());
    auto theirs = context_->createUnboundBuffer(scratch_.data(), bytes);
    auto mine = context_->createUnboundBuffer(tensor.data_ptr(), bytes);
    theirs->recv(peer, slot, 0, bytes);
    mine->send(peer, slot, 0, bytes);
    // Both waits throw gloo::IoException when the timeout passes; false means aborted.
    if (!theirs->waitRecv(timeout_) || !mine->waitSend(timeout_)) {
      throw CommError(where("all_reduce") + "the exchange with rank " + std::to_string(peer) +
                      " was aborted");
    }
    sum_function(tensor.scalar_type())(tensor.data_ptr(), tensor.data_ptr(), scratch_.data(), n);
  }

  template <typename T>
  static void set_sum(gloo::AllreduceOptions& opts, torch::Tensor& tensor, std::size_t n) {
    opts.setOutput(tensor.data_ptr<T>(), n);
    opts.setReduceFunction(&sum_reduce<T>);
  }

  std::string where(const char* op) const {
    std::ostringstream s;
    s << "gloo " << op << " on rank " << rank_ << " of " << size_ << ": ";
    return s.str();
  }

  void check_tensor(const char* op, const torch::Tensor& tensor) const {
    if (!tensor.defined()) throw CommError(where(op) + "tensor is undefined");
    if (!tensor.device().is_cpu()) {
      throw CommError(where(op) + "needs a CPU tensor, got one on " + tensor.device().str());
    }
    if (!tensor.is_contiguous()) throw CommError(where(op) + "tensor is not contiguous");
    switch (tensor.scalar_type()) {
      case torch::kFloat:
      case torch::kDouble:
      case torch::kInt:
      case torch::kLong:
        return;
      default:
        throw CommError(where(op) + "unsupported dtype " +
                        std::string(c10::toString(tensor.scalar_type())) +
                        " (expected float32, float64, int32 or int64)");
    }
  }

  void check_root(const char* op, int root) const {
    if (root < 0 || root >= size_) {
      throw CommError(where(op) + "root " + std::to_string(root) + " is not a rank (world size " +
                      std::to_string(size_) + ")");
    }
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

  uint32_t next_tag() { return tag_++; }

  std::shared_ptr<gloo::Context> context_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  uint32_t tag_ = 0;
  std::vector<char> scratch_;  // the peer's tensor in exchange_sum; grows to kExchangeMaxBytes
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw CommError("gloo: rank " + std::to_string(options.rank) + " is not within world size " +
                    std::to_string(options.world_size));
  }
  if (options.timeout.count() <= 0) {
    throw CommError("gloo: timeout must be positive, got " +
                    std::to_string(options.timeout.count()) + " ms");
  }
  // A world of one has no peers: no device, no sockets, every collective is local.
  if (options.world_size == 1) return std::make_unique<GlooCommunicator>(nullptr, options);

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
    return std::make_unique<GlooCommunicator>(std::move(context), options);
  } catch (const StoreError& e) {
    throw CommError(where + "rendezvous through the store failed: " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw CommError(where + e.what());
  } catch (const gloo::Exception& e) {
    throw CommError(where + e.what());
  }
}

}  // namespace ddl
