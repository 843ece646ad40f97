// startup_worker_torch: bench/startup_worker.cpp written against the LibTorch API a training
// program uses (prepare_context, a tensor all-reduce), so the start-up benchmark also shows what
// loading LibTorch costs each rank. Same steps, same checks, same exit codes.
//
// Exit codes: 0 done, 1 wrong sum, 5 environment / rendezvous / collective failure.
#include <torch/torch.h>

#include <exception>
#include <iostream>
#include <string>

#include "env/contract.h"
#include "worker/communicator.h"
#include "worker/parallel.h"
#include "worker/store.h"

namespace ddl {
namespace {

int run() {
  const ParallelEnv env = ParallelEnv::from_process();
  auto ctx = prepare_context(env);
  torch::Tensor ones = torch::ones({4}, torch::kFloat);
  ctx->comm->all_reduce(ones, ReduceOp::kSum);
  const float seen = ones[0].item<float>();
  if (seen != static_cast<float>(env.world_size)) {
    std::cerr << "startup_worker_torch: rank " << env.rank << " of " << env.world_size
              << ": all_reduce of ones gave " << seen << ", expected " << env.world_size
              << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ddl

int main() {
  try {
    return ddl::run();
  } catch (const ddl::env::EnvError& e) {
    std::cerr << "startup_worker_torch: environment: " << e.what() << std::endl;
  } catch (const ddl::StoreError& e) {
    std::cerr << "startup_worker_torch: rendezvous store: " << e.what() << std::endl;
  } catch (const ddl::CommError& e) {
    std::cerr << "startup_worker_torch: collective: " << e.what() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "startup_worker_torch: " << e.what() << std::endl;
  }
  return 5;
}
