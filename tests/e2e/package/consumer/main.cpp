// Joins the job launched around it and all-reduces its rank + 1: prints "sum N" (N = 1 + ... +
// world size) and exits 0, or prints the error and exits 1.
#include <cstdio>
#include <exception>

#include "worker/comm/gloo_mesh.h"
#include "worker/runtime/rendezvous.h"

int main() {
  try {
    const ddl::ParallelEnv env = ddl::ParallelEnv::from_process();
    ddl::Rendezvous joined = ddl::rendezvous(env);
    ddl::GlooOptions options;
    options.rank = env.rank;
    options.world_size = env.world_size;
    options.host = joined.host;
    auto mesh = ddl::GlooMesh::connect(*joined.store, options);
    mesh->barrier();
    double value = env.rank + 1;
    mesh->all_reduce_sum(&value, 1, ddl::DType::kFloat64);
    std::printf("rank %d of %d: sum %g\n", env.rank, env.world_size, value);
    mesh->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
