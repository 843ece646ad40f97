// train_mnist: the Paddle course's data-parallel MNIST trainer (train_multi_gpu.py) in LibTorch.
//
//   launch --nproc_per_node=2 --log_dir ./mylog train_mnist        two CPU workers
//   launch --selected_gpus=0,1,2,3 --log_dir ./mylog train_mnist   one worker per GPU
//   train_mnist                                                    standalone: a world of one
//   launch --server_num=2 --worker_num=2 train_mnist [--async]     through parameter servers
//
// It is the single-device program plus the course's four changes, marked "Change N" below. Each
// rank prints `epoch: E, batch: B, loss is: [L]` every --log_interval batches, the test accuracy
// after each epoch and one JSON summary line at the end (stdout); diagnostics go to stderr.
//
// In a parameter-server job (worker/ps/) the same program is both roles: a server (TRAINING_ROLE=
// PSERVER) builds the same net from the same seed, keeps its shard and runs the optimizer; a
// trainer pushes its gradients and gets the new parameters back instead of all-reducing.
//
// Checkpoints: rank 0 writes <save>.pt atomically after every epoch (and every --save_every steps
// when set), keeping the one it replaces as <save>.prev.pt; --resume, or a restart by the launcher
// (DDL_RESTART_COUNT > 0) finding one, continues from it on every rank, mid-epoch included. Each
// file carries a CRC-32 checked before resuming; a damaged one falls back to the previous one with
// a warning, or ends the program (exit 4) when that is no good either.
//
// Exit codes (env/exit_codes.h): 0 done, 1 training failed, 2 bad options, 3 bad data,
// 4 checkpoint problem, 5 environment / rendezvous / collective / parameter-server failure,
// 124 a rendezvous or collective deadline passed.
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/error.h"
#include "examples/mnist/checkpoint.h"
#include "examples/mnist/mnist_data.h"
#include "examples/mnist/mnist_net.h"
#include "logging/log.h"
#include "worker/ps/parameter_client.h"
#include "worker/ps/parameter_server.h"
#include "worker/ps/sharding.h"
#include "worker/runtime/compute_libraries.h"
#include "worker/runtime/fault.h"
#include "worker/runtime/parallel.h"
#include "worker/runtime/progress.h"
#include "worker/runtime/torch_error.h"

#ifndef DDL_MNIST_DEFAULT_DATA
#define DDL_MNIST_DEFAULT_DATA "data/mnist"
#endif

namespace ddl {
namespace {

namespace fs = std::filesystem;
using mnist::MnistNet;

// Bad options: the program ends with kExitUsage and "<message> (see --help)".
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(kExitUsage, "", what + " (see --help)") {}
};

struct Options {
  int epochs = 5;
  std::int64_t batch_size = 100;  // per worker, as in the course
  double lr = 0.01;
  std::string optimizer = "sgd";
  std::uint64_t seed = 0;
  std::int64_t log_interval = 200;
  std::string save = "mnist";   // checkpoint at <save>.pt; empty: none
  std::int64_t save_every = 0;  // steps between mid-epoch checkpoints; 0: after each epoch only
  bool resume = false;
  std::string device = "auto";
  std::int64_t max_steps = 0;  // global optimizer steps; 0: no limit
  std::string data;            // IDX folder or mnist.json.gz; empty: the fetched data folder
  int threads = 0;             // 0: LibTorch's default (follows OMP_NUM_THREADS)
  int collective_timeout = 120;  // seconds a collective may wait for its peers
  std::string mode = "auto";   // auto | collective | ps
  bool async = false;          // parameter servers apply each trainer's gradients on arrival
  std::optional<std::string> log_level;
};

// Parses the command line; std::nullopt when --help was asked for (the help is printed).
std::optional<Options> parse_options(int argc, char** argv) {
  cxxopts::Options spec("train_mnist",
                        "The Paddle course's data-parallel MNIST trainer. Run it under `launch` "
                        "for several workers, or alone as a world of one.");
  // clang-format off
  spec.add_options()
      ("epochs", "epochs to train", cxxopts::value<int>()->default_value("5"))
      ("batch_size", "images per batch on each worker", cxxopts::value<std::int64_t>()->default_value("100"))
      ("lr", "learning rate", cxxopts::value<double>()->default_value("0.01"))
      ("optimizer", "sgd | momentum (0.9) | adagrad | adam", cxxopts::value<std::string>()->default_value("sgd"))
      ("seed", "seed of the initial weights and of the shuffling", cxxopts::value<std::uint64_t>()->default_value("0"))
      ("log_interval", "print the loss every N batches", cxxopts::value<std::int64_t>()->default_value("200"))
      ("save", "checkpoint path prefix: rank 0 writes <save>.pt; '' saves nothing", cxxopts::value<std::string>()->default_value("mnist"))
      ("save_every", "also checkpoint every N steps (0: after each epoch only)", cxxopts::value<std::int64_t>()->default_value("0"))
      ("resume", "continue from <save>.pt (model, optimizer, epoch and batch)")
      ("device", "cpu | gpu | auto (the env's GPU when CUDA is available, else CPU)", cxxopts::value<std::string>()->default_value("auto"))
      ("max_steps", "stop after this many optimizer steps in all (0: no limit)", cxxopts::value<std::int64_t>()->default_value("0"))
      ("data_dir", "folder with the MNIST IDX files (default: <repo>/data/mnist)", cxxopts::value<std::string>())
      ("data", "IDX folder or the course's mnist.json.gz", cxxopts::value<std::string>())
      ("mode", "auto | collective | ps: how replicas stay in sync (auto: ps when the launcher started parameter servers)", cxxopts::value<std::string>()->default_value("auto"))
      ("async", "parameter-server jobs: servers apply each trainer's gradients as they arrive (default: sync, every step averages all trainers')")
      ("threads", "intra-op threads (default: LibTorch's, which follows OMP_NUM_THREADS)", cxxopts::value<int>()->default_value("0"))
      ("collective_timeout", "seconds a collective waits for its peers before giving up (exit 124)", cxxopts::value<int>()->default_value("120"))
      ("log_level", "debug | info | warn | error (default: DDL_LOG_LEVEL, else info)", cxxopts::value<std::string>())
      ("h,help", "print this help");
  // clang-format on
  cxxopts::ParseResult r;
  try {
    r = spec.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (r.count("help")) {
    std::cout << spec.help() << std::endl;
    return std::nullopt;
  }
  if (!r.unmatched().empty()) throw UsageError("unexpected argument '" + r.unmatched()[0] + "'");

  Options o;
  o.epochs = r["epochs"].as<int>();
  o.batch_size = r["batch_size"].as<std::int64_t>();
  o.lr = r["lr"].as<double>();
  o.optimizer = r["optimizer"].as<std::string>();
  o.seed = r["seed"].as<std::uint64_t>();
  o.log_interval = r["log_interval"].as<std::int64_t>();
  o.save = r["save"].as<std::string>();
  o.save_every = r["save_every"].as<std::int64_t>();
  o.resume = r.count("resume") > 0;
  o.device = r["device"].as<std::string>();
  o.max_steps = r["max_steps"].as<std::int64_t>();
  o.threads = r["threads"].as<int>();
  o.collective_timeout = r["collective_timeout"].as<int>();
  o.mode = r["mode"].as<std::string>();
  o.async = r.count("async") > 0;
  if (r.count("log_level")) o.log_level = r["log_level"].as<std::string>();
  if (r.count("data") && r.count("data_dir"))
    throw UsageError("give --data or --data_dir, not both");
  if (r.count("data")) o.data = r["data"].as<std::string>();
  if (r.count("data_dir")) o.data = r["data_dir"].as<std::string>();

  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  require(o.epochs >= 0, "--epochs must be >= 0, got " + std::to_string(o.epochs));
  require(o.batch_size > 0, "--batch_size must be > 0, got " + std::to_string(o.batch_size));
  require(o.lr > 0 && std::isfinite(o.lr), "--lr must be a positive number");
  require(o.log_interval > 0, "--log_interval must be > 0, got " + std::to_string(o.log_interval));
  require(o.save_every >= 0, "--save_every must be >= 0, got " + std::to_string(o.save_every));
  require(o.max_steps >= 0, "--max_steps must be >= 0, got " + std::to_string(o.max_steps));
  require(o.threads >= 0, "--threads must be >= 0, got " + std::to_string(o.threads));
  require(o.collective_timeout > 0,
          "--collective_timeout must be > 0, got " + std::to_string(o.collective_timeout));
  require(o.device == "auto" || o.device == "cpu" || o.device == "gpu",
          "--device must be cpu, gpu or auto, got '" + o.device + "'");
  require(o.optimizer == "sgd" || o.optimizer == "momentum" || o.optimizer == "adagrad" ||
              o.optimizer == "adam",
          "--optimizer must be sgd, momentum, adagrad or adam, got '" + o.optimizer + "'");
  require(o.mode == "auto" || o.mode == "collective" || o.mode == "ps",
          "--mode must be auto, collective or ps, got '" + o.mode + "'");
  require(!o.resume || !o.save.empty(), "--resume needs --save to name the checkpoint");
  return o;
}

// The fetched data folder: next to the build (<repo>/build*/bin/train_mnist), else the source
// folder this binary was built from.
std::string default_data_path() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path candidate = exe.parent_path().parent_path().parent_path() / "data" / "mnist";
    if (fs::is_directory(candidate, ec)) return candidate.string();
  }
  return DDL_MNIST_DEFAULT_DATA;
}

// --device auto: the GPU the launcher selected (or this node's local rank) when CUDA is usable.
torch::Device choose_device(const std::string& wanted, const ParallelEnv& env) {
  const bool cuda = torch::cuda::is_available();
  if (wanted == "auto" && !cuda && env.gpu) {
    spdlog::warn("GPU {} selected (FLAGS_selected_gpus) but CUDA is not available to this "
                 "LibTorch (no GPU visible, or a CPU-only build): training on the CPU",
                 *env.gpu);
  }
  if (wanted == "cpu" || (wanted == "auto" && !cuda)) return torch::kCPU;
  if (!cuda) {
    throw UsageError(
        "--device gpu: CUDA is not available to this LibTorch (no GPU visible, or a "
        "CPU-only build); use --device cpu");
  }
  const int gpu = env.gpu.value_or(env.local_rank);
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (gpu >= count) {
    throw UsageError("GPU " + std::to_string(gpu) + " selected (FLAGS_selected_gpus or local " +
                     "rank) but only " + std::to_string(count) + " GPU(s) are visible");
  }
  return torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(gpu));
}

std::string format_loss(float loss) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.8g", static_cast<double>(loss));
  return buf;
}

std::string format_accuracy(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", ratio);
  return buf;
}

void print_line(const std::string& line) { std::cout << line << std::endl; }

// Keeps freed activation memory in the process. Each CPU step allocates and frees the same few
// multi-MiB activation buffers; with glibc's defaults they are mmap()ed and munmap()ed (or trimmed
// off the heap) every time, and faulting their pages back in cost ~25 ms of a ~70 ms step here
// (docs/PERFORMANCE.md). Served from the heap and never trimmed below 512 MiB, they are reused.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// How the replicas of a job stay in sync: the course's collective path (DataParallel over the
// communicator) or parameter servers (worker/ps/). The training loop below is the same for both.
class Replicas {
 public:
  virtual ~Replicas() = default;
  // "collective", "ps-sync" or "ps-async".
  virtual std::string mode() const = 0;
  // Change 4: backward, bring the gradients together, update the parameters. Returns the seconds
  // spent bringing them together (waiting for the other ranks or the servers).
  virtual double step(const torch::Tensor& loss) = 0;
  // Test-set accuracy as every rank reports it.
  virtual mnist::Accuracy evaluate(MnistNet& model, const mnist::Dataset& test) = 0;
  // A save point (every rank calls it): the rank(s) that keep the state write it.
  virtual void save(const mnist::TrainingPosition& position) = 0;
  // After the last step: every rank then holds the job's final parameters.
  virtual void finish() {}
  virtual void describe(nlohmann::json& summary) const { (void)summary; }
};

enum class ResumeRule { kNever, kIfPresent, kRequired };

// The collective path: rank 0 writes <save>.pt. On resume rank 0 reads it and broadcasts its
// bytes, so every rank restores the same checkpoint, the one rank 0 sees (the other ranks need no
// shared file system); DataParallel then broadcasts rank 0's parameters.
class CollectiveReplicas : public Replicas {
 public:
  CollectiveReplicas(const Options& opt, const ParallelEnv& env, MnistNet& model,
                     const torch::Device& device, const std::string& checkpoint, ResumeRule rule,
                     mnist::TrainingPosition& position)
      : env_(env), model_(model), checkpoint_(checkpoint) {
    ContextOptions context_options;
    context_options.backend = device.is_cuda() ? Backend::kAuto : Backend::kGloo;
    context_options.collective_timeout = std::chrono::seconds(opt.collective_timeout);
    ctx_ = prepare_context(env, context_options);
    optimizer_ = mnist::make_optimizer(opt.optimizer, model->parameters(), opt.lr);
    if (rule != ResumeRule::kNever) {
      const std::optional<RankZeroCheckpoint> found =
          checkpoint_from_rank0(rule == ResumeRule::kRequired);
      if (found) {
        position = mnist::load_checkpoint_bytes(found->bytes, found->name, *model, *optimizer_,
                                                device, position);
        spdlog::info("resumed from {}: epoch {}, batch {}, step {} (written by a world of {})",
                     found->name, position.epoch, position.batch, position.global_step,
                     position.world_size);
        if (position.world_size != env.world_size && position.batch > 0) {
          // An elastic restart changed the world: the images of the epoch already seen are
          // batch * old world batches; continue at the same share of the epoch in the new one.
          const std::int64_t batch = position.batch * position.world_size / env.world_size;
          spdlog::info("the world changed from {} to {} rank(s): continuing epoch {} at batch {}",
                       position.world_size, env.world_size, position.epoch, batch);
          position.batch = batch;
        }
        position.world_size = env.world_size;
        resumed_ = true;
      }
    }
    model->use_channels_last();  // a checkpoint may have brought its own layout back
    dp_ = std::make_unique<DataParallel>(*model, *ctx_);
  }

  std::string mode() const override { return "collective"; }
  bool resumed() const { return resumed_; }

  double step(const torch::Tensor& loss) override {
    // Change 4: scale the loss, all-reduce the gradients, then step as on one device.
    dp_->scale_loss(loss).backward();
    const auto reducing = std::chrono::steady_clock::now();
    dp_->apply_collective_grads();
    const double seconds = seconds_since(reducing);
    optimizer_->step();
    optimizer_->zero_grad();
    return seconds;
  }

  // Each rank scores its own contiguous share of the test set and the counts are summed over the
  // ranks, so every rank reports the same figure.
  mnist::Accuracy evaluate(MnistNet& model, const mnist::Dataset& test) override {
    const std::int64_t n = test.size();
    const std::int64_t begin = n * env_.rank / env_.world_size;
    const std::int64_t end = n * (env_.rank + 1) / env_.world_size;
    const mnist::Accuracy mine = mnist::evaluate(model, test.slice(begin, end - begin));
    torch::Tensor counts =
        torch::tensor({mine.correct, mine.total}, torch::kLong).to(ctx_->device);
    ctx_->comm->all_reduce(counts, ReduceOp::kSum);
    counts = counts.cpu();
    return mnist::Accuracy{counts[0].item<std::int64_t>(), counts[1].item<std::int64_t>()};
  }

  void save(const mnist::TrainingPosition& position) override {
    if (checkpoint_.empty() || env_.rank != 0) return;
    mnist::save_checkpoint(checkpoint_, *model_, *optimizer_, position);
  }

 private:
  struct RankZeroCheckpoint {
    std::string name;   // the file rank 0 chose (its previous one after a failed check)
    std::string bytes;  // checked on rank 0, checked again by every rank as it loads them
  };

  // Rank 0's checkpoint file (or, when that fails its checks, its previous one), on every rank:
  // nullopt when rank 0 has none (an error when `required`, on every rank alike). A damaged
  // checkpoint with no good previous one is an error on every rank; rank 0's names the check.
  std::optional<RankZeroCheckpoint> checkpoint_from_rank0(bool required) {
    constexpr std::int64_t kNone = -1, kBad = -2;
    std::optional<mnist::CheckpointChoice> choice;
    std::optional<mnist::CheckpointError> failure;
    std::int64_t size = kNone;
    std::int64_t used_previous = 0;
    if (env_.rank == 0) {
      try {
        choice = mnist::choose_checkpoint(checkpoint_);
      } catch (const mnist::CheckpointError& e) {
        failure = e;
      }
      if (failure) {
        size = kBad;
      } else if (choice) {
        if (!choice->warning.empty()) spdlog::warn("{}", choice->warning);
        size = static_cast<std::int64_t>(choice->bytes.size());
        used_previous = choice->file != checkpoint_;
      }
    }
    torch::Tensor header = torch::tensor({size, used_previous}, torch::kLong).to(ctx_->device);
    ctx_->comm->broadcast(header, 0);
    header = header.cpu();
    size = header[0].item<std::int64_t>();
    used_previous = header[1].item<std::int64_t>();
    if (failure) throw *failure;
    if (size == kBad) {
      throw mnist::CheckpointError(checkpoint_,
                                   "rank 0 found it damaged (its log names the check)");
    }
    if (size < 0) {
      if (required) throw mnist::CheckpointError(checkpoint_, "rank 0 has no checkpoint there");
      return std::nullopt;
    }
    const std::string name =
        (used_previous ? mnist::previous_checkpoint_path(checkpoint_) : checkpoint_) +
        (env_.rank == 0 ? "" : " (rank 0's)");
    // Gloo broadcasts whole 32-bit words: the bytes travel padded to a multiple of 4.
    const std::int64_t padded = (size + 3) / 4 * 4;
    torch::Tensor data = torch::zeros({padded}, torch::kUInt8);
    if (env_.rank == 0 && size > 0) {
      std::memcpy(data.data_ptr(), choice->bytes.data(), choice->bytes.size());
    }
    torch::Tensor words = data.view(torch::kInt32).to(ctx_->device);
    ctx_->comm->broadcast(words, 0);
    data = words.cpu().contiguous().view(torch::kUInt8);
    return RankZeroCheckpoint{name, std::string(static_cast<const char*>(data.data_ptr()),
                                                static_cast<std::size_t>(size))};
  }

  bool resumed_ = false;
  const ParallelEnv& env_;
  MnistNet& model_;
  std::string checkpoint_;
  std::unique_ptr<ParallelContext> ctx_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DataParallel> dp_;
};

ps::Deadlines ps_deadlines(const env::WorkerContract& c) {
  ps::Deadlines d;
  d.join = c.rendezvous_timeout;
  return d;
}

std::string position_text(const mnist::TrainingPosition& p) {
  return nlohmann::json{{"epoch", p.epoch}, {"batch", p.batch}, {"global_step", p.global_step}}
      .dump();
}

// Through the parameter servers: the trainer holds no optimizer; the servers keep the parameters,
// the optimizer state and (on save) where each trainer is, so a resumed trainer asks them.
class PsReplicas : public Replicas {
 public:
  PsReplicas(const Options& opt, const ParallelEnv& env, MnistNet& model, bool save_enabled,
             mnist::TrainingPosition& position)
      : env_(env), mode_(opt.async ? ps::UpdateMode::kAsync : ps::UpdateMode::kSync),
        save_enabled_(save_enabled), model_(model) {
    const env::WorkerContract& c = *env.contract;
    ps::ClientConfig config;
    config.trainer_id = c.rank;
    config.trainers = c.world_size;
    config.servers = c.server_endpoints;
    config.job_id = c.job_id;
    config.secret = c.secret;
    config.mode = mode_;
    config.deadlines = ps_deadlines(c);
    model->use_channels_last();
    client_ = std::make_unique<ps::ParameterClient>(config, model->parameters());
    const std::string saved = client_->saved_position();
    if (!saved.empty()) {
      const nlohmann::json p = nlohmann::json::parse(saved, nullptr, false);
      if (!p.is_object() || !p.contains("epoch") || !p.contains("batch") ||
          !p.contains("global_step")) {
        throw ps::PsError("trainer " + std::to_string(c.rank) +
                          ": the servers hold a saved position this program cannot read: " + saved);
      }
      position.epoch = p["epoch"].get<std::int64_t>();
      position.batch = p["batch"].get<std::int64_t>();
      position.global_step = p["global_step"].get<std::int64_t>();
      resumed_ = true;
      spdlog::info("resumed from the servers' shards: epoch {}, batch {}, step {}", position.epoch,
                   position.batch, position.global_step);
    }
    spdlog::info("trainer {} of {}: {} parameter server(s), {} updates", c.rank, c.world_size,
                 client_->servers(), ps::mode_name(mode_));
  }

  bool resumed() const { return resumed_; }
  std::string mode() const override { return "ps-" + ps::mode_name(mode_); }

  double step(const torch::Tensor& loss) override {
    loss.backward();      // the servers average (sync) or apply (async) the raw gradients
    const auto pushing = std::chrono::steady_clock::now();
    client_->push_pull();
    const double seconds = seconds_since(pushing);
    model_->zero_grad();
    return seconds;
  }

  // Every trainer scores the whole test set with the parameters it holds (in sync mode these are
  // the same on every trainer, so is the figure).
  mnist::Accuracy evaluate(MnistNet& model, const mnist::Dataset& test) override {
    return mnist::evaluate(model, test);
  }

  // Sync: the servers are at one step for every trainer, so trainer 0 saves for all. Async: each
  // trainer saves its own position.
  void save(const mnist::TrainingPosition& position) override {
    if (!save_enabled_) return;
    if (mode_ == ps::UpdateMode::kSync && env_.rank != 0) return;
    client_->save(position_text(position));
  }

  // Closes the connections as soon as every trainer is done: each server then returns from
  // run() and writes its summary while this trainer still scores the test set, so `launch`,
  // which stops servers still running once every trainer has exited (as Paddle's launchers),
  // finds them gone.
  void finish() override {
    client_->finish();
    stats_ = client_->stats();
    servers_ = client_->servers();
    client_.reset();
  }

  void describe(nlohmann::json& summary) const override {
    const ps::ClientStats s = client_ ? client_->stats() : stats_;
    summary["servers"] = client_ ? client_->servers() : servers_;
    summary["server_version"] = s.version;
    summary["staleness_mean"] = s.staleness_mean;
    summary["staleness_max"] = s.staleness_max;
    summary["seconds_in_push_pull"] = s.seconds_in_push_pull;
  }

 private:
  const ParallelEnv& env_;
  ps::UpdateMode mode_;
  bool save_enabled_;
  bool resumed_ = false;
  MnistNet& model_;
  std::unique_ptr<ps::ParameterClient> client_;  // null after finish()
  ps::ClientStats stats_;                         // as finish() left them
  int servers_ = 0;
};

// True for a parameter-server job (the launcher gave this process a server list). Checks --mode
// against the job.
bool use_parameter_servers(const Options& opt, const ParallelEnv& env) {
  const bool ps_job = env.contract && !env.contract->server_endpoints.empty();
  if (opt.mode == "ps" && !ps_job) {
    throw UsageError(std::string("--mode ps needs a parameter-server job (launch --server_num=S "
                                 "--worker_num=W train_mnist ...): ") +
                     env::kPserverEndpoints + " is not set");
  }
  if (opt.mode == "collective" && ps_job) {
    throw UsageError(std::string("--mode collective in a parameter-server job (") +
                     env::kPserverEndpoints + " is set); use --mode ps or auto");
  }
  if (opt.async && !ps_job) throw UsageError("--async applies to parameter-server jobs only");
  return ps_job;
}

// Removes what a writer of `checkpoint` killed mid-write left, before this run writes it.
void remove_stale_temporaries(const std::string& checkpoint) {
  for (const std::string& file : mnist::remove_stale_temporaries(checkpoint)) {
    spdlog::info("removed {}, the temporary file of a checkpoint write that was interrupted", file);
  }
}

// A parameter server: the same net from the same seed, of which it keeps its shard.
int serve(const Options& opt, const ParallelEnv& env) {
  const env::WorkerContract& c = *env.contract;
  const int index = c.rank;
  const int servers = static_cast<int>(c.server_endpoints.size());
  torch::manual_seed(opt.seed);
  MnistNet model;
  const std::vector<torch::Tensor> params = model->parameters();
  std::vector<std::int64_t> sizes;
  for (const torch::Tensor& p : params) sizes.push_back(p.numel());
  std::vector<torch::Tensor> shard;
  for (int i : ps::shard_of(ps::assign_shards(sizes, servers), index)) {
    shard.push_back(params[static_cast<std::size_t>(i)]);
  }

  ps::ServerConfig config;
  config.index = index;
  config.servers = servers;
  config.trainers = c.world_size;
  config.endpoint = c.current;
  config.job_id = c.job_id;
  config.secret = c.secret;
  config.mode = opt.async ? ps::UpdateMode::kAsync : ps::UpdateMode::kSync;
  config.deadlines = ps_deadlines(c);
  const std::string checkpoint =
      opt.save.empty() ? "" : opt.save + ".server" + std::to_string(index) + ".pt";
  if (!checkpoint.empty()) {
    remove_stale_temporaries(checkpoint);
    config.save = [checkpoint](torch::serialize::OutputArchive& state) {
      mnist::write_archive(checkpoint, state);
    };
  }
  // --resume needs the shard (or its previous one); a restart by the launcher uses it when there
  // is one.
  if (!checkpoint.empty() && (opt.resume || c.restart_count > 0)) {
    config.load = [checkpoint, required = opt.resume](torch::serialize::InputArchive& state) {
      const std::optional<mnist::CheckpointChoice> choice = mnist::choose_checkpoint(checkpoint);
      if (!choice) {
        if (required) {
          throw mnist::CheckpointError(checkpoint, "expected a checkpoint file, found none");
        }
        return false;
      }
      if (!choice->warning.empty()) spdlog::warn("{}", choice->warning);
      mnist::read_archive_bytes(choice->bytes, choice->file, state);
      return true;
    };
  }
  ps::ParameterServer server(config, shard, [&](std::vector<torch::Tensor> p) {
    return mnist::make_optimizer(opt.optimizer, std::move(p), opt.lr);
  });
  std::int64_t elements = 0;
  for (const torch::Tensor& t : shard) elements += t.numel();
  spdlog::info("server {} of {} on {}: {} of {} tensors ({} elements), {} trainer(s), {} updates, "
               "optimizer {} lr {}",
               index, servers, c.current.str(), shard.size(), params.size(), elements,
               c.world_size, ps::mode_name(config.mode), opt.optimizer, opt.lr);
  const ps::ServerReport report = server.run();
  double sum = 0.0;
  for (const torch::Tensor& t : server.parameters()) sum += t.sum().item<double>();
  const nlohmann::json summary = {
      {"role", "server"},
      {"server", index},
      {"servers", servers},
      {"trainers", c.world_size},
      {"mode", "ps-" + ps::mode_name(config.mode)},
      {"updates", report.updates},
      {"pushes", report.pushes},
      {"staleness_mean", report.staleness_mean},
      {"staleness_max", report.staleness_max},
      {"shard_tensors", shard.size()},
      {"shard_sum", sum},
      {"resumed", report.resumed},
  };
  print_line(summary.dump());
  return kExitOk;
}

int train(const Options& opt) {
  // Change 1: this process's place in the job, and its device, come from the environment.
  const ParallelEnv env = ParallelEnv::from_process();
  const env::EnvMap vars = env::current_environment();
  const auto level = opt.log_level ? opt.log_level : env::log_level(vars);
  const bool server = env.contract && env.contract->role == env::Role::kServer;
  logging::init(server ? "server " + std::to_string(env.rank) : logging::rank_role(env.rank),
                logging::parse_level(level.value_or("info")));
  const bool through_servers = use_parameter_servers(opt, env);
  if (opt.threads > 0) torch::set_num_threads(opt.threads);
  // The BLAS's own threads follow LibTorch's: one count for the whole process, whatever started
  // it (launch sets OMP_NUM_THREADS, mpirun and srun do not), and the same results for it.
  set_blas_threads(torch::get_num_threads());
  if (server) return serve(opt, env);
  const torch::Device device = choose_device(opt.device, env);
  if (device.is_cpu()) keep_freed_memory();
  torch::manual_seed(opt.seed);

  const std::string data_path = opt.data.empty() ? default_data_path() : opt.data;
  spdlog::info("loading mnist dataset from {} ......", data_path);
  mnist::MnistData data = mnist::load(data_path);
  // The whole dataset lives on the device; batches are gathered there by index.
  const mnist::Dataset train_set = data.train.to(device);
  const mnist::Dataset test_set = data.test.to(device);
  data = {};

  // Change 2: join the job (the collective, or the parameter servers) and wrap the model.
  MnistNet model;
  model->to(device);
  const std::string checkpoint = opt.save.empty() ? "" : opt.save + ".pt";
  const int restart_count = env.contract ? env.contract->restart_count : 0;
  mnist::TrainingPosition position{0, 0, 0, opt.optimizer, opt.seed, env.world_size};
  std::unique_ptr<Replicas> replicas;
  bool resumed = false;
  if (through_servers) {
    auto ps = std::make_unique<PsReplicas>(opt, env, model, !opt.save.empty(), position);
    resumed = ps->resumed();
    replicas = std::move(ps);
  } else {
    if (env.rank == 0 && !checkpoint.empty()) remove_stale_temporaries(checkpoint);
    // --resume needs the checkpoint; a restart by the launcher uses it when there is one.
    const ResumeRule rule = opt.resume                                  ? ResumeRule::kRequired
                            : restart_count > 0 && !checkpoint.empty() ? ResumeRule::kIfPresent
                                                                        : ResumeRule::kNever;
    auto collective = std::make_unique<CollectiveReplicas>(opt, env, model, device, checkpoint,
                                                           rule, position);
    resumed = collective->resumed();
    replicas = std::move(collective);
  }
  model->train();
  const FaultInjector faults(vars, env.rank, restart_count);
  const ProgressReporter progress = ProgressReporter::from_env(vars);

  // Change 3: every rank reads a different share of each epoch.
  const DistributedBatchSampler sampler(train_set.size(), opt.batch_size, env.rank, env.world_size,
                                        opt.seed);
  spdlog::info(
      "rank {} of {} on {}, {} threads, {}; {}: {} train / {} test images; {} batches of {} "
      "per epoch on each rank; optimizer {} lr {}",
      env.rank, env.world_size, device.str(), torch::get_num_threads(), replicas->mode(),
      data_path, train_set.size(), test_set.size(), sampler.batches_per_epoch(), opt.batch_size,
      opt.optimizer, opt.lr);
  // Which BLAS does the work is decided on this machine (the libblas.so.3 alternative), not at
  // build time: said once, with a warning for the reference one.
  const ComputeLibraries compute = detect_compute_libraries();
  spdlog::info("rank {}: {}", env.rank, describe(compute));
  if (const std::string warning = reference_blas_warning(compute); !warning.empty()) {
    spdlog::warn("rank {}: {}", env.rank, warning);
  }

  auto save = [&](std::int64_t epoch, std::int64_t next_batch) {
    if (checkpoint.empty()) return;
    if (next_batch == sampler.batches_per_epoch()) {
      ++epoch;
      next_batch = 0;
    }
    position.epoch = epoch;
    position.batch = next_batch;
    progress.pause("checkpoint");
    replicas->save(position);
    progress.checkpoint(position.global_step);
    spdlog::debug("saved at epoch {}, batch {}, step {}", epoch, next_batch, position.global_step);
  };
  auto out_of_steps = [&] { return opt.max_steps > 0 && position.global_step >= opt.max_steps; };

  std::int64_t steps = 0;
  double train_seconds = 0.0;
  std::optional<float> first_loss;
  torch::Tensor last_loss;
  mnist::Accuracy accuracy;
  bool evaluated_last = false;
  for (std::int64_t epoch = position.epoch; epoch < opt.epochs && !out_of_steps(); ++epoch) {
    const std::vector<torch::Tensor> batches = sampler.batches(static_cast<int>(epoch));
    const std::int64_t first_batch = epoch == position.epoch ? position.batch : 0;
    const auto started = std::chrono::steady_clock::now();
    torch::Tensor epoch_loss_sum;  // summed on the device: no sync per step
    std::int64_t epoch_steps = 0;
    std::int64_t batch_id = first_batch;
    progress.epoch(epoch, static_cast<std::int64_t>(batches.size()));
    for (; batch_id < static_cast<std::int64_t>(batches.size()) && !out_of_steps(); ++batch_id) {
      const auto step_started = std::chrono::steady_clock::now();
      const torch::Tensor index = batches[batch_id].to(device);
      const torch::Tensor images = train_set.batch(index);
      const torch::Tensor labels = train_set.labels.index_select(0, index);
      const double data_seconds = seconds_since(step_started);
      const torch::Tensor loss = mnist::cross_entropy(model->forward(images), labels);
      const double reduce_seconds = replicas->step(loss);
      ++steps;
      ++position.global_step;
      last_loss = loss.detach();
      epoch_loss_sum = epoch_loss_sum.defined() ? epoch_loss_sum + last_loss : last_loss.clone();
      ++epoch_steps;
      // Testing aid (DDL_FAULT): fail here, after the step's collectives, as a crash would.
      faults.at_step(position.global_step);
      // To the launcher (worker/runtime/progress.h): the step and where its time went. On a GPU
      // the parts are the host's (kernels run behind it); the step's length is still its pace.
      const double step_seconds = seconds_since(step_started);
      progress.step(position.global_step,
                    {{"data", data_seconds},
                     {"compute", step_seconds - data_seconds - reduce_seconds},
                     {through_servers ? "comm" : "allreduce", reduce_seconds}});

      if (batch_id % opt.log_interval == 0 || !first_loss) {
        const float value = last_loss.item<float>();
        if (!first_loss) first_loss = value;
        if (batch_id % opt.log_interval == 0) {
          print_line("epoch: " + std::to_string(epoch) + ", batch: " + std::to_string(batch_id) +
                     ", loss is: [" + format_loss(value) + "]");
        }
      }
      if (opt.save_every > 0 && position.global_step % opt.save_every == 0) {
        save(epoch, batch_id + 1);
      }
    }
    if (last_loss.defined()) last_loss.item<float>();  // waits for the device's queued work
    const double epoch_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    train_seconds += epoch_seconds;
    if (epoch_steps > 0) {
      // For the run report (launcher/report/): this rank's mean loss and rate in the epoch.
      const double mean = epoch_loss_sum.item<double>() / static_cast<double>(epoch_steps);
      const double rate = epoch_seconds > 0 ? static_cast<double>(epoch_steps * opt.batch_size) /
                                                  epoch_seconds
                                            : 0.0;
      char rate_text[32];
      std::snprintf(rate_text, sizeof rate_text, "%.1f", rate);
      print_line("epoch: " + std::to_string(epoch) + ", mean loss: " + format_loss(static_cast<float>(mean)) +
                 ", images/s: " + rate_text);
    }

    progress.pause("evaluation");
    accuracy = replicas->evaluate(model, test_set);
    evaluated_last = true;
    print_line("epoch: " + std::to_string(epoch) +
               ", test accuracy: " + format_accuracy(accuracy.ratio()) + " (" +
               std::to_string(accuracy.correct) + "/" + std::to_string(accuracy.total) + ")");
    save(epoch, batch_id);
  }
  replicas->finish();
  // Parameter servers: the final parameters may be newer than the last epoch's (async), so the
  // figure is taken again; collective: nothing changed since.
  if (!evaluated_last || through_servers) accuracy = replicas->evaluate(model, test_set);

  const mnist::ParamChecksum checksum = mnist::param_checksum(*model);
  const double images = static_cast<double>(steps * opt.batch_size);
  const double rank_rate = train_seconds > 0 ? images / train_seconds : 0.0;
  nlohmann::json summary = {
      {"rank", env.rank},
      {"world", env.world_size},
      {"mode", replicas->mode()},
      {"epochs", opt.epochs},
      {"steps", steps},
      {"global_step", position.global_step},
      {"train_seconds", train_seconds},
      {"images_per_sec", rank_rate * env.world_size},
      {"images_per_sec_rank", rank_rate},
      {"test_accuracy", accuracy.ratio()},
      {"param_checksum", checksum.hex()},
      {"param_sum", checksum.sum},
      {"loss", last_loss.defined() ? nlohmann::json(last_loss.item<float>()) : nlohmann::json()},
      {"first_loss", first_loss ? nlohmann::json(*first_loss) : nlohmann::json()},
      {"optimizer", opt.optimizer},
      {"device", device.str()},
      {"resumed", resumed},
  };
  replicas->describe(summary);
  print_line(summary.dump());
  return kExitOk;
}

// The error that ends the program: a bad option value that logging::parse_level or make_optimizer
// rejected (std::invalid_argument) is a usage error; LibTorch's and ours as torch_exit_for reads
// them (each of ours carries its exit code, env/exit_codes.h).
ErrorExit exit_for_trainer(const std::exception& error) {
  if (dynamic_cast<const std::invalid_argument*>(&error)) return {kExitUsage, error.what()};
  return torch_exit_for(error);
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  using namespace ddl;
  return run_main(
      [&] {
        const std::optional<Options> options = parse_options(argc, argv);
        return options ? train(*options) : kExitOk;
      },
      print_error("train_mnist"), exit_for_trainer);
}
