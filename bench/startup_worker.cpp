// startup_worker: the smallest complete data-parallel job, for the start-up benchmark. Each rank
// reads the env contract, rendezvouses (prepare_context: store + Gloo mesh), all-reduces one small
// tensor, checks the sum and exits. `launch --nproc_per_node=N startup_worker` is timed against
// `torchrun --nproc_per_node=N bench/startup_ref.py`, the same steps in PyTorch.
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
    std::cerr << "startup_worker: rank " << env.rank << " of " << env.world_size
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
    std::cerr << "startup_worker: environment: " << e.what() << std::endl;
  } catch (const ddl::StoreError& e) {
    std::cerr << "startup_worker: rendezvous store: " << e.what() << std::endl;
  } catch (const ddl::CommError& e) {
    std::cerr << "startup_worker: collective: " << e.what() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "startup_worker: " << e.what() << std::endl;
  }
  return 5;
}
