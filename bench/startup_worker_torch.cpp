// startup_worker_torch: bench/startup_worker.cpp written against the LibTorch API a training
// program uses (prepare_context, a tensor all-reduce), so the start-up benchmark also shows what
// loading LibTorch costs each rank. Same steps, same checks, same exit codes.
//
// Exit codes: 0 done, 1 wrong sum, 5 environment / rendezvous / collective failure.
#include <torch/torch.h>

#include "bench/bench_main.h"
#include "worker/comm/communicator.h"
#include "worker/runtime/parallel.h"

namespace ddl {
namespace {

int run() {
  const ParallelEnv env = ParallelEnv::from_process();
  auto ctx = prepare_context(env);
  torch::Tensor ones = torch::ones({4}, torch::kFloat);
  ctx->comm->all_reduce(ones, ReduceOp::kSum);
  return bench::check_sum_of_ones("startup_worker_torch", env, ones[0].item<float>());
}

}  // namespace
}  // namespace ddl

int main() { return ddl::bench::run_reporting("startup_worker_torch", ddl::run); }
