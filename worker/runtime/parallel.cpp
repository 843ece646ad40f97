// The data-parallel API: environment, context (store + communicator), DataParallel and the
// distributed batch sampler.
#include "worker/runtime/parallel.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "worker/comm/gloo_communicator.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/runtime/progress.h"

namespace ddl {

// --- prepare_context -----------------------------------------------------------------------------

namespace {

// Whether LibTorch can run on CUDA device `gpu`.
bool torch_cuda_usable(int gpu) {
  return torch::cuda::is_available() && gpu < static_cast<int>(torch::cuda::device_count());
}

std::string rank_text(const ParallelEnv& env) {
  return "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
}

}  // namespace

std::unique_ptr<ParallelContext> prepare_context(const ParallelEnv& env,
                                                 const ContextOptions& options) {
  auto ctx = std::make_unique<ParallelContext>();
  ctx->env = env;
  // A rank that Slurm or Open MPI started (no FLAGS_selected_gpus) takes the GPU of its local
  // rank when there is one, as Horovod's and torchrun-on-Slurm recipes do.
  const bool from_scheduler =
      env.contract && env.contract->source != env::WorkerContract::Source::kLaunch;
  if (!ctx->env.gpu && from_scheduler && options.backend != Backend::kGloo && nccl_available() &&
      torch_cuda_usable(env.local_rank)) {
    ctx->env.gpu = env.local_rank;
  }
  // Start-up phases for the launcher's run report (worker/runtime/progress.h).
  const ProgressReporter progress = ProgressReporter::from_env(env::current_environment());
  Rendezvous joined = rendezvous(env, options.rendezvous_timeout);
  progress.phase("store");
  ctx->store_server = std::move(joined.store_server);
  ctx->store = std::move(joined.store);

  Backend backend = options.backend;
  if (backend == Backend::kAuto) {
    const bool gpu_ready = ctx->env.gpu && nccl_available() && torch_cuda_usable(*ctx->env.gpu);
    if (ctx->env.gpu && !gpu_ready) {
      spdlog::warn(
          "GPU {} selected but {}; using Gloo on the CPU", *ctx->env.gpu,
          !nccl_available() ? "this build has no NCCL" : "LibTorch cannot use that CUDA device");
    }
    backend = gpu_ready ? Backend::kNccl : Backend::kGloo;
  }

  if (backend == Backend::kNccl) {
    const int gpu = ctx->env.gpu.value_or(env.local_rank);
    if (nccl_available() && !torch_cuda_usable(gpu)) {
      throw CommError(
          "nccl on " + rank_text(env) + ": LibTorch cannot use CUDA device " + std::to_string(gpu) +
          " (torch::cuda::is_available() = " + (torch::cuda::is_available() ? "true" : "false") +
          ", " + std::to_string(torch::cuda::device_count()) + " device(s))");
    }
    NcclOptions nccl;
    nccl.rank = env.rank;
    nccl.world_size = env.world_size;
    nccl.device = gpu;
    nccl.timeout = options.collective_timeout;
    ctx->comm = make_nccl_communicator(*ctx->store, nccl);
    ctx->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu));
  } else {
    GlooOptions gloo;
    gloo.rank = env.rank;
    gloo.world_size = env.world_size;
    gloo.host = joined.host;
    gloo.timeout = options.collective_timeout;
    ctx->comm = make_gloo_communicator(*ctx->store, gloo);
    ctx->device = torch::kCPU;
  }
  // Every rank returns only once all meshes are connected: rank 0 hosts the store, and a rank
  // that left early would take it away from peers still exchanging addresses through it.
  if (env.world_size > 1) ctx->comm->barrier();
  progress.phase("communicator");
  spdlog::debug("context ready: {} backend {}, device {}", rank_text(env), ctx->comm->backend(),
                ctx->device.str());
  return ctx;
}

// --- DataParallel --------------------------------------------------------------------------------

namespace {

using GroupKey = std::tuple<int, int, int>;  // dtype, device type, device index

GroupKey group_key(const torch::Tensor& t) {
  return {static_cast<int>(t.scalar_type()), static_cast<int>(t.device().type()),
          static_cast<int>(t.device().index())};
}

std::vector<std::int64_t> dense_strides(torch::IntArrayRef sizes) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<std::int64_t>(sizes[i], 1);
  }
  return strides;
}

// The strides `param`'s gradient gets in its bucket: the parameter's own when its layout is dense
// (a channels-last conv weight keeps channels-last), else the contiguous ones. Autograd's layout
// contract wants a gradient laid out like its parameter: it then accumulates into the bucket in
// place; otherwise it copies the gradient every step and warns once. A dense layout of N elements
// covers exactly N consecutive elements, so it fits the parameter's slot either way.
std::vector<std::int64_t> grad_strides(const torch::Tensor& param) {
  if (param.is_non_overlapping_and_dense()) return param.strides().vec();
  return dense_strides(param.sizes());
}

// A tensor like `param` that shares `flat`'s storage from element `offset`. Made with set_()
// rather than narrow()/view() so autograd does not see a view: optimizers call detach_() on
// gradients, which autograd refuses for views.
torch::Tensor alias_into(const torch::Tensor& flat, std::int64_t offset,
                         const torch::Tensor& param) {
  torch::NoGradGuard no_grad;
  torch::Tensor t = torch::empty({0}, flat.options());
  t.set_(flat.storage(), flat.storage_offset() + offset, param.sizes(), grad_strides(param));
  return t;
}

bool aliases(const torch::Tensor& grad, const torch::Tensor& flat, std::int64_t offset,
             const torch::Tensor& param) {
  return grad.defined() && grad.sizes() == param.sizes() &&
         grad.strides() == torch::IntArrayRef(grad_strides(param)) &&
         grad.scalar_type() == flat.scalar_type() && grad.device() == flat.device() &&
         grad.data_ptr() == static_cast<const void*>(static_cast<const char*>(flat.data_ptr()) +
                                                     offset * flat.element_size());
}

// Broadcasts `tensors` from rank 0, coalesced into one flat buffer per dtype and device.
void broadcast_coalesced(Communicator& comm, const std::vector<torch::Tensor>& tensors) {
  std::map<GroupKey, std::vector<torch::Tensor>> groups;
  std::vector<GroupKey> order;
  for (const auto& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    auto key = group_key(t);
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].push_back(t);
  }
  torch::NoGradGuard no_grad;
  for (const auto& key : order) {
    auto& group = groups[key];
    std::vector<torch::Tensor> flats;
    flats.reserve(group.size());
    for (const auto& t : group) flats.push_back(t.detach().reshape({-1}));
    torch::Tensor flat = torch::cat(flats);
    comm.broadcast(flat, 0);
    if (comm.rank() == 0) continue;
    std::int64_t offset = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace

DataParallel::DataParallel(torch::nn::Module& module, ParallelContext& ctx)
    : DataParallel(module, ctx, Options{}) {}

DataParallel::DataParallel(torch::nn::Module& module, ParallelContext& ctx, Options options)
    : module_(module), ctx_(ctx), options_(options) {
  if (!ctx_.comm) throw CommError("DataParallel: the context has no communicator");
  if (options_.bucket_bytes == 0) throw std::invalid_argument("DataParallel: bucket_bytes is 0");
  sync_params();
}

torch::Tensor DataParallel::scale_loss(const torch::Tensor& loss) const {
  return loss / ctx_.world_size();
}

void DataParallel::build_buckets() {
  // Reverse registration order: roughly the order backward produces gradients, which is the
  // order an overlapped all-reduce would want to launch buckets in.
  std::vector<torch::Tensor> params;
  std::set<const void*> seen;  // a parameter shared between submodules is reduced once
  for (const auto& p : module_.parameters()) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  }
  std::reverse(params.begin(), params.end());

  std::map<GroupKey, std::vector<torch::Tensor>> groups;
  std::vector<GroupKey> order;
  for (const auto& p : params) {
    auto key = group_key(p);
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].push_back(p);
  }
  for (const auto& key : order) {
    std::vector<torch::Tensor> current;
    std::size_t current_bytes = 0;
    auto flush = [&] {
      if (current.empty()) return;
      Bucket bucket;
      std::int64_t total = 0;
      for (const auto& p : current) {
        bucket.offsets.push_back(total);
        total += p.numel();
      }
      bucket.flat = torch::zeros({total}, current.front().options().requires_grad(false));
      bucket.params = std::move(current);
      buckets_.push_back(std::move(bucket));
      current.clear();
      current_bytes = 0;
    };
    for (const auto& p : groups[key]) {
      const std::size_t bytes = static_cast<std::size_t>(p.numel()) * p.element_size();
      if (!current.empty() && current_bytes + bytes > options_.bucket_bytes) flush();
      current.push_back(p);
      current_bytes += bytes;
    }
    flush();
  }
}

void DataParallel::apply_collective_grads() {
  if (buckets_.empty()) build_buckets();
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    for (std::size_t i = 0; i < bucket.params.size(); ++i) {
      auto& param = bucket.params[i];
      const std::int64_t offset = bucket.offsets[i];
      torch::Tensor& grad = param.mutable_grad();
      if (aliases(grad, bucket.flat, offset, param)) continue;  // backward wrote into the bucket
      // First step, or the optimizer replaced or dropped the gradient (zero_grad set_to_none):
      // bring it into the bucket and point the gradient there again. A rank without a gradient
      // for this parameter contributes zeros, so every rank runs the same collectives.
      torch::Tensor slot = alias_into(bucket.flat, offset, param);
      if (grad.defined()) {
        slot.copy_(grad);
      } else {
        slot.zero_();
      }
      grad = slot;
    }
    ctx_.comm->all_reduce(bucket.flat, ReduceOp::kSum);
  }
}

void DataParallel::sync_params() {
  std::vector<torch::Tensor> tensors;
  for (const auto& p : module_.parameters()) tensors.push_back(p);
  for (const auto& b : module_.buffers()) tensors.push_back(b);
  broadcast_coalesced(*ctx_.comm, tensors);
}

// --- DistributedBatchSampler ---------------------------------------------------------------------

DistributedBatchSampler::DistributedBatchSampler(std::int64_t dataset_size, std::int64_t batch_size,
                                                 int rank, int world_size, std::uint64_t seed,
                                                 bool shuffle)
    : dataset_size_(dataset_size),
      batch_size_(batch_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle) {
  if (dataset_size < 0) {
    throw std::invalid_argument("DistributedBatchSampler: dataset_size " +
                                std::to_string(dataset_size) + " is negative");
  }
  if (batch_size < 1) {
    throw std::invalid_argument("DistributedBatchSampler: batch_size " +
                                std::to_string(batch_size) + " must be at least 1");
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("DistributedBatchSampler: rank " + std::to_string(rank) +
                                " is not within world size " + std::to_string(world_size));
  }
}

std::int64_t DistributedBatchSampler::batches_per_epoch() const {
  return dataset_size_ / (batch_size_ * world_size_);
}

std::vector<torch::Tensor> DistributedBatchSampler::batches(int epoch) const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset_size_));
  for (std::int64_t i = 0; i < dataset_size_; ++i) order[static_cast<std::size_t>(i)] = i;
  if (shuffle_) {
    // Our own Fisher-Yates with an unbiased bounded draw, so the order depends only on the seed
    // and the epoch, not on the standard library's shuffle or distributions.
    std::mt19937_64 rng(seed_ + static_cast<std::uint64_t>(epoch));
    for (std::size_t i = order.size(); i > 1; --i) {
      const std::uint64_t bound = i;
      const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                                  std::numeric_limits<std::uint64_t>::max() % bound;
      std::uint64_t draw;
      do {
        draw = rng();
      } while (draw >= limit);
      std::swap(order[i - 1], order[static_cast<std::size_t>(draw % bound)]);
    }
  }
  const std::int64_t count = batches_per_epoch();
  std::vector<torch::Tensor> result;
  result.reserve(static_cast<std::size_t>(count));
  for (std::int64_t b = 0; b < count; ++b) {
    const std::int64_t start = (b * world_size_ + rank_) * batch_size_;
    torch::Tensor batch = torch::empty({batch_size_}, torch::kLong);
    std::copy(order.begin() + start, order.begin() + start + batch_size_,
              batch.data_ptr<std::int64_t>());
    result.push_back(std::move(batch));
  }
  return result;
}

}  // namespace ddl
