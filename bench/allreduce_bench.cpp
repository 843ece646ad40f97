// allreduce_bench: latency and bandwidth of our Gloo all-reduce between the ranks of one job.
//
//   launch --nproc_per_node=2 allreduce_bench [--min_bytes 4096] [--max_bytes 67108864] [--factor 4]
//
// For each size (float32 tensors, min_bytes, min_bytes*factor, ..., max_bytes): one checked
// all-reduce, `warmup` untimed ones, then `iters` timed ones. Every timed iteration starts after a
// barrier and lasts until the slowest rank has its result (per-iteration maximum over ranks); rank 0
// prints one JSON line per size with the median, 10th and 90th percentile latency and the median
// algorithm bandwidth (bytes / median latency). bench/allreduce_ref.py is the same method on
// torch.distributed (Gloo); keep the two in step.
//
// Exit codes: 0 done, 1 wrong result, 2 bad options, 5 environment / rendezvous / collective failure.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cxxopts.hpp>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "env/contract.h"
#include "worker/comm/communicator.h"
#include "worker/runtime/parallel.h"
#include "store/store.h"

namespace ddl {
namespace {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::int64_t min_bytes = 4096;
  std::int64_t max_bytes = 64ll << 20;
  std::int64_t factor = 4;
  std::int64_t iters = 0;   // 0: iterations_for(bytes)
  std::int64_t warmup = 0;  // 0: max(2, iters / 10)
};

// Enough iterations for a stable median at small sizes, bounded time at large ones.
// allreduce_ref.py uses the same rule.
std::int64_t iterations_for(std::int64_t bytes) {
  return std::clamp<std::int64_t>((256ll << 20) / bytes, 10, 200);
}

Options parse_options(int argc, char** argv) {
  cxxopts::Options spec("allreduce_bench", "All-reduce latency and bandwidth of our Gloo communicator");
  // clang-format off
  spec.add_options()
      ("min_bytes", "smallest tensor", cxxopts::value<std::int64_t>()->default_value("4096"))
      ("max_bytes", "largest tensor", cxxopts::value<std::int64_t>()->default_value("67108864"))
      ("factor", "size step (multiplier)", cxxopts::value<std::int64_t>()->default_value("4"))
      ("iters", "timed iterations per size (0: 256 MiB / size, within 10..200)", cxxopts::value<std::int64_t>()->default_value("0"))
      ("warmup", "untimed iterations per size (0: max(2, iters / 10))", cxxopts::value<std::int64_t>()->default_value("0"));
  // clang-format on
  cxxopts::ParseResult r;
  try {
    r = spec.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  Options o;
  o.min_bytes = r["min_bytes"].as<std::int64_t>();
  o.max_bytes = r["max_bytes"].as<std::int64_t>();
  o.factor = r["factor"].as<std::int64_t>();
  o.iters = r["iters"].as<std::int64_t>();
  o.warmup = r["warmup"].as<std::int64_t>();
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0 || o.max_bytes < o.min_bytes) {
    throw UsageError("need 4 <= min_bytes <= max_bytes, min_bytes a multiple of 4; got " +
                     std::to_string(o.min_bytes) + " and " + std::to_string(o.max_bytes));
  }
  if (o.factor < 2) throw UsageError("--factor must be >= 2, got " + std::to_string(o.factor));
  if (o.iters < 0 || o.warmup < 0) throw UsageError("--iters and --warmup must be >= 0");
  return o;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int run(const Options& opt) {
  const ParallelEnv env = ParallelEnv::from_process();
  auto ctx = prepare_context(env);
  Communicator& comm = *ctx->comm;
  using Clock = std::chrono::steady_clock;

  for (std::int64_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= opt.factor) {
    const std::int64_t n = bytes / 4;
    const std::int64_t iters = opt.iters > 0 ? opt.iters : iterations_for(bytes);
    const std::int64_t warmup = opt.warmup > 0 ? opt.warmup : std::max<std::int64_t>(2, iters / 10);

    torch::Tensor t = torch::full({n}, static_cast<float>(env.rank + 1), torch::kFloat);
    comm.all_reduce(t, ReduceOp::kSum);
    const float expected = static_cast<float>(env.world_size * (env.world_size + 1) / 2);
    if (t[0].item<float>() != expected || t[n - 1].item<float>() != expected) {
      std::cerr << "allreduce_bench: rank " << env.rank << ", " << bytes << " bytes: sum "
                << t[0].item<float>() << " .. " << t[n - 1].item<float>() << ", expected "
                << expected << std::endl;
      return 1;
    }
    t.zero_();  // zeros stay finite however often they are summed
    for (std::int64_t i = 0; i < warmup; ++i) comm.all_reduce(t, ReduceOp::kSum);

    torch::Tensor seconds = torch::empty({iters}, torch::kDouble);
    double* s = seconds.data_ptr<double>();
    for (std::int64_t i = 0; i < iters; ++i) {
      comm.barrier();
      const auto start = Clock::now();
      comm.all_reduce(t, ReduceOp::kSum);
      s[i] = std::chrono::duration<double>(Clock::now() - start).count();
    }
    const std::vector<torch::Tensor> all = comm.all_gather(seconds);
    const torch::Tensor slowest = torch::stack(all).amax(0);
    std::vector<double> lat(slowest.data_ptr<double>(), slowest.data_ptr<double>() + iters);
    if (env.rank == 0) {
      const double median = percentile(lat, 0.5);
      nlohmann::json line = {
          {"bench", "allreduce"},
          {"impl", "ddl"},
          {"world", env.world_size},
          {"bytes", bytes},
          {"iters", iters},
          {"median_us", median * 1e6},
          {"p10_us", percentile(lat, 0.1) * 1e6},
          {"p90_us", percentile(lat, 0.9) * 1e6},
          {"algbw_GBps", static_cast<double>(bytes) / median / 1e9},
      };
      std::cout << line.dump() << std::endl;
    }
  }
  return 0;
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  return ddl::bench::run_reporting("allreduce_bench", [&] {
    try {
      return ddl::run(ddl::parse_options(argc, argv));
    } catch (const ddl::UsageError& e) {
      std::cerr << "allreduce_bench: " << e.what() << std::endl;
      return 2;
    }
  });
}
