// startup_worker: the smallest complete data-parallel job, for the start-up benchmark. Each rank
// reads the env contract, joins the job (rendezvous: the TCP store, every rank present), connects
// the Gloo mesh, all-reduces four floats, checks the sum and exits. It links our runtime without
// LibTorch (worker/runtime/rendezvous.h, worker/comm/gloo_mesh.h), which is what a native worker gets to do;
// `launch --nproc_per_node=N startup_worker` is timed against
// `torchrun --nproc_per_node=N bench/startup_ref.py`, the same steps in PyTorch, and
// bench/startup_worker_torch.cpp repeats them through LibTorch's tensors.
//
// Exit codes: 0 done, 1 wrong sum, 5 environment / rendezvous / collective failure.
#include <array>

#include "bench/bench_main.h"
#include "worker/comm/gloo_mesh.h"
#include "worker/runtime/progress.h"
#include "worker/runtime/rendezvous.h"

namespace ddl {
namespace {

int run() {
  const ParallelEnv env = ParallelEnv::from_process();
  // The phases go to the launcher (DDL_PROGRESS_FD), for the run report's start-up by phase.
  const ProgressReporter progress = ProgressReporter::from_env(env::current_environment());
  Rendezvous joined = rendezvous(env);
  progress.phase("store");
  GlooOptions options;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.host = joined.host;
  auto mesh = GlooMesh::connect(*joined.store, options);
  progress.phase("communicator");
  // As prepare_context does: nobody leaves (rank 0 taking the store along) before all meshes
  // are connected.
  mesh->barrier();
  progress.phase("barrier");
  std::array<float, 4> ones{1.0f, 1.0f, 1.0f, 1.0f};
  mesh->all_reduce_sum(ones.data(), ones.size(), DType::kFloat32);
  progress.step(1);
  for (float seen : ones) {
    if (int bad = bench::check_sum_of_ones("startup_worker", env, seen)) return bad;
  }
  return 0;
}

}  // namespace
}  // namespace ddl

int main() { return ddl::bench::run_reporting("startup_worker", ddl::run); }
