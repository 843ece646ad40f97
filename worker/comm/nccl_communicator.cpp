// NCCL communicator. The unique-id exchange is plain store traffic and always compiled; the
// communicator itself only when CMake found CUDA + NCCL (DDL_WITH_NCCL).
//
// Ordering: a collective records an event on the stream that produced the tensor (LibTorch's
// current CUDA stream when this LibTorch has CUDA, else the legacy default stream), makes its own
// stream wait on it, runs the NCCL call on its own stream, then makes the producer stream wait on
// the collective's completion. The host does not block (except in barrier()). send() and recv()
// are one ncclSend / ncclRecv each, in a group of their own (ncclGroupStart / ncclGroupEnd), run
// the same way. A sub-group is a communicator of its own, initialised from a unique id exchanged
// under the group's store prefix (worker/comm/rank_group.h).
//
// Failure: the communicator is created non-blocking, so initialisation polls with a deadline. A
// watchdog thread polls ncclCommGetAsyncError and the completion of every enqueued collective; on
// an asynchronous error or a collective older than the timeout it aborts the communicator (which
// also unblocks kernels waiting on a dead peer) and records the error; the next call on the
// communicator throws it as a CommError.
#include "worker/comm/nccl_communicator.h"

#include <sstream>
#include <string>
#include <utility>

#include "worker/comm/tensor_checks.h"
#include "store/prefix_store.h"

#ifdef DDL_WITH_NCCL
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#endif

namespace ddl {
namespace {

std::string rank_text(const NcclOptions& options) {
  return "rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size);
}

void check_unique_id_size(const Bytes& id, const NcclOptions& options, const char* origin) {
#ifdef DDL_WITH_NCCL
  if (id.size() != NCCL_UNIQUE_ID_BYTES) {
    throw CommError("nccl unique id on " + rank_text(options) + ": " + origin + " " +
                    std::to_string(id.size()) + " bytes, expected NCCL_UNIQUE_ID_BYTES = " +
                    std::to_string(NCCL_UNIQUE_ID_BYTES));
  }
#else
  if (id.empty()) {
    throw CommError("nccl unique id on " + rank_text(options) + ": " + origin + " an empty id");
  }
#endif
}

NcclOptions options_in_group(const NcclOptions& options, const GroupPlace& place) {
  NcclOptions inner = options;
  inner.rank = place.rank;
  inner.world_size = place.size;
  inner.store_prefix = place.store_prefix;
  return inner;
}

}  // namespace

NcclOptions nccl_group_options(const NcclOptions& options, const RankGroup& group) {
  return options_in_group(options, place_in_group("nccl", options.rank, options.world_size, group,
                                                  options.store_prefix));
}

bool nccl_available() {
#ifdef DDL_WITH_NCCL
  return true;
#else
  return false;
#endif
}

Bytes exchange_nccl_unique_id(Store& store, const NcclOptions& options,
                              const std::function<Bytes()>& create_id) {
  PrefixStore ids(store, options.store_prefix);
  const std::string key = "unique_id";
  if (options.rank == 0) {
    Bytes id = create_id();
    check_unique_id_size(id, options, "create_id returned");
    ids.set(key, id);
    return id;
  }
  if (!ids.wait_for({key}, options.timeout)) {
    throw CommError("nccl unique id on " + rank_text(options) + ": rank 0 did not publish '" +
                    ids.full_key(key) + "' within " + std::to_string(options.timeout.count()) +
                    " ms");
  }
  Bytes id = ids.get(key, options.timeout);
  check_unique_id_size(id, options, "the store holds");
  return id;
}

#ifndef DDL_WITH_NCCL

std::unique_ptr<Communicator> make_nccl_communicator(Store&, const NcclOptions& options) {
  throw CommError("nccl on " + rank_text(options) +
                  ": this build has no NCCL (configure with WITH_NCCL=ON and CUDA + NCCL under "
                  "CUDA_HOME or /usr/local/cuda)");
}

std::unique_ptr<Communicator> make_nccl_communicator(Store& store, const NcclOptions& options,
                                                     const RankGroup& group) {
  // The list is checked first, so a bad one reads the same with and without NCCL.
  nccl_group_options(options, group);
  return make_nccl_communicator(store, options);
}

#else  // DDL_WITH_NCCL

namespace {

std::string nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult " + std::to_string(static_cast<int>(r));
  }
}

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kWatchInterval{20};
constexpr std::chrono::microseconds kPollInterval{50};

class NcclCommunicator : public Communicator {
 public:
  // `group_text` names the group in every message ("" for the whole job).
  NcclCommunicator(const NcclOptions& options, const Bytes& unique_id, std::string group_text)
      : rank_(options.rank),
        size_(options.world_size),
        device_(options.device),
        timeout_(options.timeout),
        group_text_(std::move(group_text)) {
    cuda_check("cudaSetDevice", cudaSetDevice(device_));
    cuda_check("cudaStreamCreateWithFlags",
               cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cuda_check("cudaEventCreate", cudaEventCreateWithFlags(&ready_event_, cudaEventDisableTiming));
    cuda_check("cudaMalloc", cudaMalloc(&barrier_buffer_, sizeof(int)));

    ncclUniqueId id;
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a peer that never arrives cannot hang us past the deadline
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      release();
      throw CommError(where("init") + nccl_text(r));
    }
    try {
      wait_until_ready("init", Clock::now() + timeout_);
    } catch (...) {
      release();
      throw;
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    release();
  }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    check_tensor("all_reduce", tensor);
    if (tensor.numel() > 0) {
      run("all_reduce", [&] {
        return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(),
                             static_cast<std::size_t>(tensor.numel()), nccl_type(tensor), ncclSum,
                             comm_, stream_);
      });
    }
    if (op == ReduceOp::kAverage && size_ > 1) {
      // On the producer stream, after the collective (run() made it wait). Integer averages
      // truncate toward zero, as with Gloo.
      if (tensor.is_floating_point()) {
        tensor.div_(size_);
      } else {
        tensor.div_(size_, "trunc");
      }
    }
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    check_tensor("broadcast", tensor);
    check_root(where("broadcast"), root, size_);
    if (tensor.numel() == 0) return;
    run("broadcast", [&] {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(),
                           static_cast<std::size_t>(tensor.numel()), nccl_type(tensor), root, comm_,
                           stream_);
    });
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    check_tensor("all_gather", tensor);
    std::vector<int64_t> shape{size_};
    for (auto d : tensor.sizes()) shape.push_back(d);
    torch::Tensor out = torch::empty(shape, tensor.options());
    if (tensor.numel() > 0) {
      run("all_gather", [&] {
        return ncclAllGather(tensor.data_ptr(), out.data_ptr(),
                             static_cast<std::size_t>(tensor.numel()), nccl_type(tensor), comm_,
                             stream_);
      });
    }
    return out.unbind(0);
  }

  // One ncclSend / ncclRecv in its own group, on our stream between the producer stream's work
  // before and after it, like the collectives.
  void send(const torch::Tensor& tensor, int dst) override {
    const std::string at = where("send", "to", dst);
    check_peer(at, dst, rank_, size_);
    ddl::check_tensor(at, tensor, nccl_tensor_rules(device_));
    if (tensor.numel() == 0) return;
    const ncclDataType_t type = nccl_type(tensor);
    run(
        "send",
        [&] {
          return grouped([&] {
            return ncclSend(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), type, dst,
                            comm_, stream_);
          });
        },
        " to rank " + std::to_string(dst));
  }

  void recv(torch::Tensor& tensor, int src) override {
    const std::string at = where("recv", "from", src);
    check_peer(at, src, rank_, size_);
    ddl::check_tensor(at, tensor, nccl_tensor_rules(device_));
    if (tensor.numel() == 0) return;
    const ncclDataType_t type = nccl_type(tensor);
    run(
        "recv",
        [&] {
          return grouped([&] {
            return ncclRecv(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), type, src,
                            comm_, stream_);
          });
        },
        " from rank " + std::to_string(src));
  }

  void barrier() override {
    cudaEvent_t done = run("barrier", [&] {
      return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm_, stream_);
    });
    // The host must not return before every rank has arrived: poll the collective's completion,
    // bounded by the timeout (the watchdog aborts it on a dead peer, which also ends this wait).
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady)
        throw CommError(where("barrier") + "cudaEventQuery: " + cuda_text(e));
      throw_if_failed("barrier");
      if (Clock::now() > deadline) {
        fail_and_abort("barrier did not complete within " + std::to_string(timeout_.count()) +
                       " ms");
        throw_if_failed("barrier");
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

 private:
  struct Pending {
    cudaEvent_t event;
    Clock::time_point deadline;
    const char* op;
  };

  std::string where(const char* op) const {
    std::ostringstream s;
    s << "nccl " << op << " on rank " << rank_ << " of " << size_ << group_text_
      << " (cuda:" << device_ << "): ";
    return s.str();
  }

  // "nccl send on rank 0 of 2 (cuda:0) (to rank 1): "
  std::string where(const char* op, const char* direction, int peer) const {
    std::string text = where(op);
    text.insert(text.size() - 2,
                std::string(" (") + direction + " rank " + std::to_string(peer) + ")");
    return text;
  }

  // Runs one NCCL call between ncclGroupStart and ncclGroupEnd. The group is ended even when the
  // call failed, as NCCL requires; the call's failure wins over the end's.
  template <typename F>
  static ncclResult_t grouped(F&& call) {
    const ncclResult_t start = ncclGroupStart();
    if (start != ncclSuccess) return start;
    const ncclResult_t body = call();
    const ncclResult_t end = ncclGroupEnd();
    return body != ncclSuccess && body != ncclInProgress ? body : end;
  }

  std::string nccl_text(ncclResult_t r) const {
    std::string text = nccl_result_name(r) + " (" + ncclGetErrorString(r) + ")";
    if (comm_ != nullptr) {
      const char* last = ncclGetLastError(comm_);
      if (last != nullptr && *last != '\0') text += ": " + std::string(last);
    }
    return text;
  }

  void cuda_check(const char* call, cudaError_t e) const {
    if (e != cudaSuccess) {
      throw CommError(where("setup") + call + ": " + cuda_text(e));
    }
  }

  void check_tensor(const char* op, const torch::Tensor& tensor) const {
    ddl::check_tensor(where(op), tensor, nccl_tensor_rules(device_));
  }

  // The NCCL type of a tensor check_tensor accepted (nccl_tensor_rules).
  static ncclDataType_t nccl_type(const torch::Tensor& tensor) {
    switch (tensor.scalar_type()) {
      case torch::kDouble:
        return ncclFloat64;
      case torch::kInt:
        return ncclInt32;
      case torch::kLong:
        return ncclInt64;
      case torch::kHalf:
        return ncclFloat16;
      case torch::kFloat:
        return ncclFloat32;
      default:
        throw CommError("nccl: dtype " + dtype_name(tensor.scalar_type()) +
                        " passed the tensor check but has no NCCL type");
    }
  }

  // The stream LibTorch enqueues work on for our device, when this LibTorch has CUDA.
  const c10::impl::DeviceGuardImplInterface* torch_cuda() const {
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return nullptr;
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  }

  // Enqueues one NCCL call on our stream between the producer stream's work before it and after
  // it; returns the completion event (owned by the pending list / pool).
  // `peer_text` (" to rank 1") goes into the message of a call that fails at once.
  template <typename F>
  cudaEvent_t run(const char* op, F&& call, const std::string& peer_text = "") {
    throw_if_failed(op);
    int previous_device = 0;
    cudaGetDevice(&previous_device);
    if (previous_device != device_) cuda_check("cudaSetDevice", cudaSetDevice(device_));

    const auto* torch_impl = torch_cuda();
    const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_));
    if (torch_impl != nullptr) {
      const c10::Stream producer = torch_impl->getStream(device);
      torch_impl->record(&torch_ready_event_, producer, device.index(),
                         c10::EventFlag::PYTORCH_DEFAULT);
      cuda_check("cudaStreamWaitEvent",
                 cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(torch_ready_event_), 0));
    } else {
      cuda_check("cudaEventRecord", cudaEventRecord(ready_event_, cudaStreamLegacy));
      cuda_check("cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, ready_event_, 0));
    }

    cudaEvent_t done = take_event();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (comm_ == nullptr) {  // the watchdog aborted it since throw_if_failed above
        lock.unlock();
        throw_if_failed(op);
      }
      ncclResult_t r = call();
      if (r != ncclSuccess && r != ncclInProgress) {
        lock.unlock();
        fail_and_abort(std::string(op) + peer_text + " failed: " + nccl_text(r));
        throw_if_failed(op);
      }
      lock.unlock();
      if (r == ncclInProgress) wait_until_ready(op, Clock::now() + timeout_);
      cuda_check("cudaEventRecord", cudaEventRecord(done, stream_));
      lock.lock();
      pending_.push_back({done, Clock::now() + timeout_, op});
    }
    if (torch_impl != nullptr) {
      torch_impl->block(static_cast<void*>(done), torch_impl->getStream(device));
    } else {
      cuda_check("cudaStreamWaitEvent", cudaStreamWaitEvent(cudaStreamLegacy, done, 0));
    }
    if (previous_device != device_) cudaSetDevice(previous_device);
    return done;
  }

  // Polls a non-blocking communicator until its last call has been enqueued or failed.
  void wait_until_ready(const char* op, Clock::time_point deadline) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (comm_ == nullptr) break;
        ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) state = r;
      }
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        fail_and_abort(std::string(op) + " failed: " + nccl_text(state));
        break;
      }
      if (Clock::now() > deadline) {
        fail_and_abort(std::string(op) + " did not complete within " +
                       std::to_string(timeout_.count()) + " ms (a peer may be missing or dead)");
        break;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    throw_if_failed(op);
  }

  cudaEvent_t take_event() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    cuda_check("cudaEventCreate", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  // Records the first error and aborts the communicator. Never throws (the watchdog calls it).
  void fail_and_abort(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = what;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  void throw_if_failed(const char* op) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.empty()) throw CommError(where(op) + error_ + " (communicator aborted)");
  }

  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, kWatchInterval);
      if (stopping_ || comm_ == nullptr) continue;
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      std::string failure;
      if (r != ncclSuccess) {
        failure = "ncclCommGetAsyncError: " + nccl_text(r);
      } else if (state != ncclSuccess && state != ncclInProgress) {
        failure = "asynchronous NCCL error: " + nccl_text(state);
      }
      while (failure.empty() && !pending_.empty()) {
        const Pending& p = pending_.front();
        cudaError_t e = cudaEventQuery(p.event);
        if (e == cudaSuccess) {
          free_events_.push_back(p.event);
          pending_.pop_front();
        } else if (e == cudaErrorNotReady) {
          if (Clock::now() > p.deadline) {
            failure = std::string(p.op) + " did not complete within " +
                      std::to_string(timeout_.count()) + " ms (a peer may be dead)";
          }
          break;
        } else {
          failure = std::string(p.op) + ": cudaEventQuery: " + cuda_text(e);
        }
      }
      if (!failure.empty()) {
        if (error_.empty()) error_ = failure;
        ncclCommAbort(comm_);
        comm_ = nullptr;
      }
    }
  }

  // Frees everything; safe on a partly constructed communicator.
  void release() noexcept {
    if (comm_ != nullptr) {
      bool clean = error_.empty();
      if (clean && ncclCommFinalize(comm_) == ncclSuccess) {
        const auto deadline = Clock::now() + timeout_;
        ncclResult_t state = ncclInProgress;
        while (state == ncclInProgress && Clock::now() < deadline) {
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
          if (state == ncclInProgress) std::this_thread::sleep_for(kPollInterval);
        }
        clean = state == ncclSuccess;
      } else {
        clean = false;
      }
      if (clean) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (const auto& p : pending_) cudaEventDestroy(p.event);
    pending_.clear();
    for (auto e : free_events_) cudaEventDestroy(e);
    free_events_.clear();
    if (torch_ready_event_ != nullptr) {
      if (const auto* impl = torch_cuda()) {
        impl->destroyEvent(torch_ready_event_, static_cast<c10::DeviceIndex>(device_));
      }
      torch_ready_event_ = nullptr;
    }
    if (ready_event_ != nullptr) cudaEventDestroy(ready_event_);
    ready_event_ = nullptr;
    if (barrier_buffer_ != nullptr) cudaFree(barrier_buffer_);
    barrier_buffer_ = nullptr;
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  int rank_;
  int size_;
  int device_;
  std::chrono::milliseconds timeout_;
  std::string group_text_;

  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_event_ = nullptr;  // producer event when LibTorch has no CUDA
  void* torch_ready_event_ = nullptr;  // producer event created through LibTorch
  void* barrier_buffer_ = nullptr;

  // Guards comm_, error_, pending_, free_events_ and stopping_ between the caller and the
  // watchdog.
  std::mutex mutex_;
  std::condition_variable wake_;
  ncclComm_t comm_ = nullptr;
  std::string error_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

namespace {

std::string group_text(const GroupPlace& place) {
  return " in group '" + place.label + "' (job rank " + std::to_string(place.job_rank) + ")";
}

std::unique_ptr<Communicator> connect_nccl(Store& store, const NcclOptions& options,
                                           const std::string& group) {
  const std::string where = "nccl on " + rank_text(options) + group + ": ";
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw CommError(where + "rank is not within the world size");
  }
  // Check the device before the id exchange so a rank without a GPU fails at once, naming it.
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    throw CommError(where + "CUDA device " + std::to_string(options.device) +
                    " is not usable: cudaGetDeviceCount: " + cuda_text(e));
  }
  if (options.device < 0 || options.device >= count) {
    throw CommError(where + "CUDA device " + std::to_string(options.device) + " is not visible (" +
                    std::to_string(count) + " device(s) visible)");
  }
  Bytes id = exchange_nccl_unique_id(store, options, [&] {
    ncclUniqueId unique;
    ncclResult_t r = ncclGetUniqueId(&unique);
    if (r != ncclSuccess) {
      throw CommError(where + "ncclGetUniqueId: " + nccl_result_name(r) + " (" +
                      ncclGetErrorString(r) + ")");
    }
    return Bytes(unique.internal, unique.internal + sizeof(unique.internal));
  });
  return std::make_unique<NcclCommunicator>(options, id, group);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Store& store, const NcclOptions& options) {
  return connect_nccl(store, options, "");
}

std::unique_ptr<Communicator> make_nccl_communicator(Store& store, const NcclOptions& options,
                                                     const RankGroup& group) {
  const GroupPlace place =
      place_in_group("nccl", options.rank, options.world_size, group, options.store_prefix);
  claim_group(store, place, "nccl", options.timeout);
  return connect_nccl(store, options_in_group(options, place), group_text(place));
}

#endif  // DDL_WITH_NCCL

}  // namespace ddl
