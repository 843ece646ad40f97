// ParallelEnv and the store rendezvous.
#include "worker/runtime/rendezvous.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "env/scheduler.h"
#include "net/conn_limits.h"
#include "store/memory_store.h"
#include "store/tcp_store.h"
#include "worker/runtime/secret_file.h"

namespace ddl {

namespace {

// This machine's host name, where a rank of a multi-node scheduler job listens.
std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    throw env::EnvError(std::string("cannot read this machine's host name: ") +
                        std::strerror(errno));
  }
  return name;
}

// Ranks a scheduler started without DDL_JOB_SECRET share one machine (env/scheduler.h requires
// the secret across machines): they take the job's secret from a file only this user can read
// (worker/runtime/secret_file.h). Without one, the store runs open, as before, and rank 0 says so.
std::optional<SharedSecret> scheduler_secret(const env::WorkerContract& c) {
  if (c.source == env::WorkerContract::Source::kLaunch || !c.secret.empty()) return std::nullopt;
  std::string why_not;
  auto shared = shared_secret(default_secret_folder(), c.job_id, why_not);
  if (!shared && c.rank == 0) {
    spdlog::warn(
        "rank 0: the store of job '{}' ({}) admits any local user: no {} and no private secret "
        "file ({}); set {} in every rank",
        c.job_id, env::source_name(c.source), env::kJobSecret, why_not, env::kJobSecret);
  }
  return shared;
}

}  // namespace

ParallelEnv ParallelEnv::from_process() { return from_env(env::current_environment()); }

ParallelEnv ParallelEnv::from_env(const env::EnvMap& vars) {
  ParallelEnv e;
  e.contract = env::from_env(vars);
  // Started by Slurm's srun or Open MPI's mpirun without `launch`: their variables say where.
  if (!e.contract) e.contract = env::scheduler_contract(vars);
  if (e.contract) {
    e.rank = e.contract->rank;
    e.world_size = e.contract->world_size;
    e.local_rank = e.contract->local_rank;
    e.gpu = e.contract->gpu;
  } else if (auto g = env::lookup(vars, env::kSelectedGpus); g && !g->empty()) {
    // Started by hand on one GPU: a world of one on the device the user chose (empty: CPU).
    e.gpu = env::parse_non_negative_int(*g, env::kSelectedGpus);
  }
  return e;
}

Rendezvous rendezvous(const ParallelEnv& env, std::optional<std::chrono::milliseconds> timeout) {
  Rendezvous r;
  if (!env.contract) {
    if (env.world_size != 1 || env.rank != 0) {
      throw env::EnvError("rank " + std::to_string(env.rank) + " of world size " +
                          std::to_string(env.world_size) +
                          " needs the worker contract (PADDLE_TRAINER_ENDPOINTS, ...) to find "
                          "its peers; without it only a world of one can run");
    }
    r.store = std::make_unique<MemoryStore>();
    return r;
  }
  const env::WorkerContract& c = *env.contract;
  c.validate();
  const auto deadline = timeout.value_or(c.rendezvous_timeout);
  TcpStoreOptions options;
  options.endpoint = c.endpoints.at(0);
  // The launcher hands every generation its own job id ("<id>-g<restart>", Generation::job_id in
  // launcher/cluster/generation.h), so a worker left over from before a restart is refused by the
  // new store.
  options.job_id = c.job_id;
  options.secret = c.secret;
  const std::optional<SharedSecret> shared = scheduler_secret(c);
  if (shared) options.secret = shared->secret;
  options.rank = c.rank;
  options.world_size = c.world_size;
  options.connect_timeout = deadline;
  // Ranks started without launch (mpirun, srun) raise their own limit; rank 0 says when it stays
  // low, since it hosts the store.
  if (const std::string why = net::raise_open_file_limit(
          net::wanted_open_files(static_cast<std::size_t>(c.world_size)));
      !why.empty() && c.rank == 0) {
    spdlog::warn("{}", why);
  }
  if (c.rank == 0) r.store_server = std::make_shared<TcpStoreServer>(options);
  r.store = std::make_unique<TcpStore>(options);
  barrier(*r.store, "join", c.rank, c.world_size, deadline);
  // Every rank has read the secret file by now (it joined with it).
  if (shared && c.rank == 0) {
    std::error_code ignored;
    std::filesystem::remove(shared->path, ignored);
  }
  r.host = c.current.host.empty() ? this_host_name() : c.current.host;
  return r;
}

}  // namespace ddl
