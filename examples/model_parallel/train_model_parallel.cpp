// train_model_parallel: the course's MNIST net cut in two, one stage per rank (model parallelism,
// the seed's other way to spread a net over devices), micro-batches pipelined GPipe style.
//
//   launch --nproc_per_node=2 --log_dir ./mylog train_model_parallel     the 2-stage pipeline
//   train_model_parallel --single                                        the unsplit net, one process
//
// Rank 0 runs the convolutions (stage 0), rank 1 the classifier (stage 1); the schedule is in
// pipeline.h. Both ranks build the whole net from --seed and each keeps its stage, so a stage
// starts from exactly the parameters the single-process net has, and both read the same batches
// in the same order (one sampler over the whole set: this is not data parallelism). Rank 1, which
// has the loss, prints `epoch: E, batch: B, loss is: [L]`; both ranks print the test accuracy
// after each epoch (scored together: stage 0's features, stage 1's classifier) and one JSON line.
//
// Exit codes (env/exit_codes.h): 0 done, 1 training failed, 2 bad options (a world other than 2
// included), 3 bad data, 5 environment / rendezvous / communication failure, 124 a rendezvous or
// collective deadline passed (the launcher then dumps the stacks of the ranks still running).
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cxxopts.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/error.h"
#include "examples/mnist/mnist_data.h"
#include "examples/mnist/mnist_net.h"
#include "examples/model_parallel/pipeline.h"
#include "examples/model_parallel/stages.h"
#include "logging/log.h"
#include "worker/runtime/compute_libraries.h"
#include "worker/runtime/fault.h"
#include "worker/runtime/parallel.h"
#include "worker/runtime/torch_error.h"

#ifndef DDL_MNIST_DEFAULT_DATA
#define DDL_MNIST_DEFAULT_DATA "data/mnist"
#endif

namespace ddl {
namespace {

namespace fs = std::filesystem;
namespace mp = model_parallel;

// Bad options: the program ends with kExitUsage and "<message> (see --help)".
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(kExitUsage, "", what + " (see --help)") {}
};

struct Options {
  int epochs = 1;
  std::int64_t batch_size = 100;
  double lr = 0.01;
  std::string optimizer = "sgd";
  std::uint64_t seed = 0;
  std::int64_t log_interval = 200;
  std::int64_t max_steps = 0;  // 0: no limit
  std::int64_t micro_batches = 4;
  bool single = false;
  std::string device = "auto";
  std::string data;  // IDX folder or mnist.json.gz; empty: the fetched data folder
  int threads = 0;   // 0: LibTorch's default (follows OMP_NUM_THREADS)
  int collective_timeout = 120;  // seconds a send, recv or collective may wait for the other stage
  std::optional<std::string> log_level;
};

void require(bool ok, const std::string& what) {
  if (!ok) throw UsageError(what);
}

void validate(const Options& o) {
  require(o.epochs >= 0, "--epochs must be >= 0, got " + std::to_string(o.epochs));
  require(o.batch_size > 0, "--batch_size must be > 0, got " + std::to_string(o.batch_size));
  require(o.lr > 0 && std::isfinite(o.lr), "--lr must be a positive number");
  require(o.log_interval > 0, "--log_interval must be > 0, got " + std::to_string(o.log_interval));
  require(o.max_steps >= 0, "--max_steps must be >= 0, got " + std::to_string(o.max_steps));
  require(o.micro_batches > 0 && o.micro_batches <= o.batch_size,
          "--micro_batches must be between 1 and --batch_size (" + std::to_string(o.batch_size) +
              "), got " + std::to_string(o.micro_batches));
  require(o.threads >= 0, "--threads must be >= 0, got " + std::to_string(o.threads));
  require(o.collective_timeout > 0,
          "--collective_timeout must be > 0, got " + std::to_string(o.collective_timeout));
  require(o.device == "auto" || o.device == "cpu" || o.device == "gpu",
          "--device must be cpu, gpu or auto, got '" + o.device + "'");
  require(o.optimizer == "sgd" || o.optimizer == "momentum" || o.optimizer == "adagrad" ||
              o.optimizer == "adam",
          "--optimizer must be sgd, momentum, adagrad or adam, got '" + o.optimizer + "'");
}

// Parses the command line; std::nullopt when --help was asked for (the help is printed).
std::optional<Options> parse_options(int argc, char** argv) {
  cxxopts::Options spec("train_model_parallel",
                        "The course's MNIST net split over 2 ranks (convolutions on rank 0, "
                        "classifier on rank 1), micro-batches pipelined. Run it under "
                        "`launch --nproc_per_node=2`, or with --single for the unsplit net.");
  // clang-format off
  spec.add_options()
      ("epochs", "epochs to train", cxxopts::value<int>()->default_value("1"))
      ("batch_size", "images per batch (the whole batch goes through both stages)", cxxopts::value<std::int64_t>()->default_value("100"))
      ("micro_batches", "micro-batches each batch is cut into and pipelined", cxxopts::value<std::int64_t>()->default_value("4"))
      ("lr", "learning rate", cxxopts::value<double>()->default_value("0.01"))
      ("optimizer", "sgd | momentum (0.9) | adagrad | adam", cxxopts::value<std::string>()->default_value("sgd"))
      ("seed", "seed of the initial weights and of the shuffling", cxxopts::value<std::uint64_t>()->default_value("0"))
      ("log_interval", "print the loss every N batches", cxxopts::value<std::int64_t>()->default_value("200"))
      ("max_steps", "stop after this many optimizer steps in all (0: no limit)", cxxopts::value<std::int64_t>()->default_value("0"))
      ("single", "train the unsplit net in this one process (a world of one does it anyway)")
      ("device", "cpu | gpu | auto (the env's GPU when CUDA is available, else CPU)", cxxopts::value<std::string>()->default_value("auto"))
      ("data_dir", "folder with the MNIST IDX files (default: <repo>/data/mnist)", cxxopts::value<std::string>())
      ("data", "IDX folder or the course's mnist.json.gz", cxxopts::value<std::string>())
      ("threads", "intra-op threads (default: LibTorch's, which follows OMP_NUM_THREADS)", cxxopts::value<int>()->default_value("0"))
      ("collective_timeout", "seconds a send, recv or collective waits for the other stage before giving up (exit 124)", cxxopts::value<int>()->default_value("120"))
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
  o.micro_batches = r["micro_batches"].as<std::int64_t>();
  o.lr = r["lr"].as<double>();
  o.optimizer = r["optimizer"].as<std::string>();
  o.seed = r["seed"].as<std::uint64_t>();
  o.log_interval = r["log_interval"].as<std::int64_t>();
  o.max_steps = r["max_steps"].as<std::int64_t>();
  o.single = r.count("single") > 0;
  o.device = r["device"].as<std::string>();
  o.threads = r["threads"].as<int>();
  o.collective_timeout = r["collective_timeout"].as<int>();
  if (r.count("log_level")) o.log_level = r["log_level"].as<std::string>();
  require(!(r.count("data") && r.count("data_dir")), "give --data or --data_dir, not both");
  if (r.count("data")) o.data = r["data"].as<std::string>();
  if (r.count("data_dir")) o.data = r["data_dir"].as<std::string>();
  validate(o);
  return o;
}

// The fetched data folder next to the build (<repo>/build*/bin/<this program>), else the source
// folder this binary was configured from.
std::string default_data_path() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path candidate = exe.parent_path().parent_path().parent_path() / "data" / "mnist";
    if (fs::is_directory(candidate, ec)) return candidate.string();
  }
  return DDL_MNIST_DEFAULT_DATA;
}

// As train_mnist chooses: the GPU the launcher named (or the local rank) when CUDA is usable.
torch::Device choose_device(const std::string& wanted, const ParallelEnv& env) {
  const bool cuda = torch::cuda::is_available();
  if (wanted == "cpu" || (wanted == "auto" && !cuda)) return torch::kCPU;
  if (!cuda) {
    throw UsageError("--device gpu: CUDA is not available to this LibTorch; use --device cpu");
  }
  const int gpu = env.gpu.value_or(env.local_rank);
  const auto count = static_cast<int>(torch::cuda::device_count());
  require(gpu < count, "GPU " + std::to_string(gpu) + " selected (FLAGS_selected_gpus or local " +
                           "rank) but only " + std::to_string(count) + " GPU(s) are visible");
  return torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(gpu));
}

// The mode follows from the world: one process trains the unsplit net, two run the pipeline.
bool pipelined(const Options& opt, const ParallelEnv& env) {
  if (env.world_size == mp::kStages) {
    require(!opt.single, "--single trains in one process, but this is rank " +
                             std::to_string(env.rank) + " of a world of " +
                             std::to_string(env.world_size) + "; start it without launch");
    return true;
  }
  require(env.world_size == 1,
          "the pipeline has " + std::to_string(mp::kStages) + " stages, one per rank, so it "
          "needs a world of " + std::to_string(mp::kStages) + " (launch --nproc_per_node=" +
          std::to_string(mp::kStages) + "), got a world of " + std::to_string(env.world_size) +
          " (this is rank " + std::to_string(env.rank) + ")");
  return false;
}

// Keeps freed activation buffers in the heap instead of returning them to the kernel after every
// step: the same few multi-MiB blocks are reused each batch, and unmapping them costs page faults
// on the next one (the trick train_mnist uses, docs/PERFORMANCE.md).
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
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

// What the training loop asks of this process's part: the unsplit net, stage 0 or stage 1.
class Role {
 public:
  virtual ~Role() = default;
  // Forward and backward of the batch `index` names (gradients accumulate); the batch loss when
  // this role computes it.
  virtual std::optional<torch::Tensor> train_batch(const torch::Tensor& index,
                                                   const std::vector<std::int64_t>& sizes) = 0;
  virtual mnist::Accuracy evaluate() = 0;
  virtual torch::nn::Module& module() = 0;
  // Fields of the summary line that depend on the role.
  virtual nlohmann::json describe() = 0;
};

nlohmann::json checksum_fields(const torch::nn::Module& module) {
  const mnist::ParamChecksum c = mnist::param_checksum(module);
  return {{"param_checksum", c.hex()}, {"param_sum", c.sum}};
}

class SingleRole : public Role {
 public:
  SingleRole(mnist::MnistNet net, mnist::Dataset train, mnist::Dataset test)
      : net_(std::move(net)), train_(std::move(train)), test_(std::move(test)) {}
  std::optional<torch::Tensor> train_batch(const torch::Tensor& index,
                                           const std::vector<std::int64_t>& sizes) override {
    return mp::train_batch_single(net_, train_.batch(index),
                                  train_.labels.index_select(0, index), sizes);
  }
  mnist::Accuracy evaluate() override { return mnist::evaluate(net_, test_, mp::kEvalSlice); }
  torch::nn::Module& module() override { return *net_; }
  // The whole net's checksum, and each stage's, to compare with the two ranks of a pipeline.
  nlohmann::json describe() override {
    nlohmann::json fields = checksum_fields(*net_);
    fields["mode"] = "single";
    fields["stage"] = nullptr;
    const mp::FeatureStage features(net_);
    const mp::ClassifierStage classifier(net_);
    const mnist::ParamChecksum c0 = mnist::param_checksum(*features);
    const mnist::ParamChecksum c1 = mnist::param_checksum(*classifier);
    fields["stage_param_checksum"] = {c0.hex(), c1.hex()};
    fields["stage_param_sum"] = {c0.sum, c1.sum};
    return fields;
  }

 private:
  mnist::MnistNet net_;
  mnist::Dataset train_, test_;
};

class FeatureRole : public Role {
 public:
  FeatureRole(mp::FeatureStage stage, Communicator& comm, mnist::Dataset train,
              mnist::Dataset test)
      : stage_(stage), side_(stage, comm), train_(std::move(train)), test_(std::move(test)) {}
  std::optional<torch::Tensor> train_batch(const torch::Tensor& index,
                                           const std::vector<std::int64_t>& sizes) override {
    side_.train_batch(train_.batch(index), sizes);
    return std::nullopt;
  }
  mnist::Accuracy evaluate() override { return side_.evaluate(test_); }
  torch::nn::Module& module() override { return *stage_; }
  nlohmann::json describe() override {
    nlohmann::json fields = checksum_fields(*stage_);
    fields["mode"] = "pipeline";
    fields["stage"] = 0;
    return fields;
  }

 private:
  mp::FeatureStage stage_;
  mp::FeatureSide side_;
  mnist::Dataset train_, test_;
};

class ClassifierRole : public Role {
 public:
  ClassifierRole(mp::ClassifierStage stage, Communicator& comm, torch::Device device,
                 mnist::Dataset train, mnist::Dataset test)
      : stage_(stage),
        side_(stage, comm, device),
        train_(std::move(train)),
        test_(std::move(test)) {}
  std::optional<torch::Tensor> train_batch(const torch::Tensor& index,
                                           const std::vector<std::int64_t>& sizes) override {
    return side_.train_batch(train_.labels.index_select(0, index), sizes);
  }
  mnist::Accuracy evaluate() override { return side_.evaluate(test_); }
  torch::nn::Module& module() override { return *stage_; }
  nlohmann::json describe() override {
    nlohmann::json fields = checksum_fields(*stage_);
    fields["mode"] = "pipeline";
    fields["stage"] = 1;
    return fields;
  }

 private:
  mp::ClassifierStage stage_;
  mp::ClassifierSide side_;
  mnist::Dataset train_, test_;
};

// Builds this process's role from a whole net made with the seed: every rank makes the same net,
// so each stage starts from the single-process net's parameters. Stage 1 drops the images (it
// needs only the labels).
std::unique_ptr<Role> make_role(bool pipeline, const ParallelContext* ctx, torch::Device device,
                                mnist::MnistData& data) {
  mnist::MnistNet net;
  mnist::Dataset train = data.train.to(device);
  mnist::Dataset test = data.test.to(device);
  data = {};
  if (!pipeline) {
    net->to(device);
    return std::make_unique<SingleRole>(net, std::move(train), std::move(test));
  }
  if (ctx->rank() == mp::kFeatureRank) {
    mp::FeatureStage stage(net);
    stage->to(device);
    return std::make_unique<FeatureRole>(stage, *ctx->comm, std::move(train), std::move(test));
  }
  mp::ClassifierStage stage(net);
  stage->to(device);
  train.images = torch::Tensor();
  test.images = torch::Tensor();
  return std::make_unique<ClassifierRole>(stage, *ctx->comm, device, std::move(train),
                                          std::move(test));
}

struct LoopResult {
  std::int64_t steps = 0;
  double train_seconds = 0.0;
  std::optional<float> first_loss, last_loss;
  mnist::Accuracy accuracy;
};

// Waits for the device's queued work (the backward of the last batch) before the clock stops.
void wait_for_device(torch::nn::Module& module) {
  const std::vector<torch::Tensor> params = module.parameters();
  if (!params.empty() && params.front().is_cuda()) params.front().sum().item<float>();
}

LoopResult train_loop(const Options& opt, Role& role, std::int64_t dataset_size,
                      torch::Device device, const FaultInjector& faults) {
  auto optimizer = mnist::make_optimizer(opt.optimizer, role.module().parameters(), opt.lr);
  // One shuffled order over the whole set, identical on both ranks (a world of one for the
  // sampler: both stages see every batch).
  const DistributedBatchSampler sampler(dataset_size, opt.batch_size, 0, 1, opt.seed);
  const std::vector<std::int64_t> sizes = mp::micro_batch_sizes(opt.batch_size, opt.micro_batches);
  auto out_of_steps = [&](std::int64_t steps) { return opt.max_steps > 0 && steps >= opt.max_steps; };
  LoopResult r;
  bool evaluated_last = false;
  for (int epoch = 0; epoch < opt.epochs && !out_of_steps(r.steps); ++epoch) {
    const std::vector<torch::Tensor> batches = sampler.batches(epoch);
    const auto started = std::chrono::steady_clock::now();
    for (std::size_t b = 0; b < batches.size() && !out_of_steps(r.steps); ++b) {
      const std::optional<torch::Tensor> loss = role.train_batch(batches[b].to(device), sizes);
      optimizer->step();
      optimizer->zero_grad();
      ++r.steps;
      // Testing aid (DDL_FAULT): fail here, after the step's sends and receives, as a crash would.
      faults.at_step(r.steps);
      const auto batch_id = static_cast<std::int64_t>(b);
      if (loss && (batch_id % opt.log_interval == 0 || !r.first_loss)) {
        const float value = loss->item<float>();
        if (!r.first_loss) r.first_loss = value;
        if (batch_id % opt.log_interval == 0) {
          print_line("epoch: " + std::to_string(epoch) + ", batch: " + std::to_string(batch_id) +
                     ", loss is: [" + format_loss(value) + "]");
        }
      }
      if (loss && (b + 1 == batches.size() || out_of_steps(r.steps))) {
        r.last_loss = loss->item<float>();
      }
    }
    wait_for_device(role.module());
    r.train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    r.accuracy = role.evaluate();
    evaluated_last = true;
    print_line("epoch: " + std::to_string(epoch) +
               ", test accuracy: " + format_accuracy(r.accuracy.ratio()) + " (" +
               std::to_string(r.accuracy.correct) + "/" + std::to_string(r.accuracy.total) + ")");
  }
  if (!evaluated_last) r.accuracy = role.evaluate();
  return r;
}

nlohmann::json optional_number(const std::optional<float>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

int train(const Options& opt) {
  const ParallelEnv env = ParallelEnv::from_process();
  const env::EnvMap vars = env::current_environment();
  const auto level = opt.log_level ? opt.log_level : env::log_level(vars);
  logging::init(logging::rank_role(env.rank), logging::parse_level(level.value_or("info")));
  const bool pipeline = pipelined(opt, env);  // before the rendezvous: a bad world fails at once
  const torch::Device device = choose_device(opt.device, env);
  if (opt.threads > 0) torch::set_num_threads(opt.threads);
  // The BLAS's threads follow LibTorch's, under any launcher (train_mnist.cpp says why).
  set_blas_threads(torch::get_num_threads());
  if (device.is_cpu()) keep_freed_memory();
  torch::manual_seed(opt.seed);

  const std::string data_path = opt.data.empty() ? default_data_path() : opt.data;
  spdlog::info("loading mnist dataset from {} ......", data_path);
  mnist::MnistData data = mnist::load(data_path);
  const std::int64_t train_size = data.train.size();

  std::unique_ptr<ParallelContext> ctx;
  if (pipeline) {
    ContextOptions context_options;
    context_options.backend = device.is_cuda() ? Backend::kAuto : Backend::kGloo;
    context_options.collective_timeout = std::chrono::seconds(opt.collective_timeout);
    ctx = prepare_context(env, context_options);
  }
  std::unique_ptr<Role> role = make_role(pipeline, ctx.get(), device, data);
  spdlog::info("{} on {}, {} threads ({}); {} train images, batch {} in {} micro-batch(es); "
               "optimizer {} lr {}",
               pipeline ? (env.rank == mp::kFeatureRank ? "stage 0 (conv1, conv2)"
                                                        : "stage 1 (fc)")
                        : "single process, unsplit net",
               device.str(), torch::get_num_threads(), ctx ? ctx->comm->backend() : "no comm",
               train_size, opt.batch_size,
               mp::micro_batch_sizes(opt.batch_size, opt.micro_batches).size(), opt.optimizer,
               opt.lr);

  const FaultInjector faults(vars, env.rank, env.contract ? env.contract->restart_count : 0);
  const LoopResult r = train_loop(opt, *role, train_size, device, faults);
  const double images = static_cast<double>(r.steps * opt.batch_size);
  nlohmann::json summary = {
      {"rank", env.rank},
      {"world", env.world_size},
      {"steps", r.steps},
      {"train_seconds", r.train_seconds},
      // Every image passes through both stages, so the pipeline's rate is each rank's rate.
      {"images_per_sec", r.train_seconds > 0 ? images / r.train_seconds : 0.0},
      {"test_accuracy", r.accuracy.ratio()},
      {"loss", optional_number(r.last_loss)},
      {"first_loss", optional_number(r.first_loss)},
      {"micro_batches", opt.micro_batches},
      {"batch_size", opt.batch_size},
      {"optimizer", opt.optimizer},
      {"device", device.str()},
  };
  summary.update(role->describe());
  print_line(summary.dump());
  return kExitOk;
}

// The error that ends the program: a bad option value that logging::parse_level or make_optimizer
// rejected (std::invalid_argument) is a usage error; LibTorch's and ours as torch_exit_for reads
// them (each of ours carries its exit code, env/exit_codes.h).
ErrorExit exit_for_trainer(const std::exception& error) {
  if (dynamic_cast<const std::invalid_argument*>(&error)) return {kExitUsage, error.what()};
  // The stages talk by send/recv as much as by collectives: "communication: ...".
  if (const auto* e = dynamic_cast<const CommError*>(&error)) {
    return {e->exit_code(), std::string("communication: ") + e->what()};
  }
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
      print_error("train_model_parallel"), exit_for_trainer);
}
