// `launch [options] WORKER [WORKER ARGS...]`: starts this node's workers of a data-parallel job
// and supervises them (see launcher/options.h, plan.h, supervisor.h).
//
// Exit codes: 0 when every worker of the last start (after --max_restarts restarts at most) exits
// 0; that start's first failed worker's code (128+signal when it was killed); 124 when the hang
// guard (--hang_timeout) ended it; 128+signal when the launcher is interrupted; 2 for a bad command
// line; 127 when WORKER is not an executable; 1 for any other error before or while starting the
// job. docs/FAILURES.md has the whole story.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <iostream>

#include "env/contract.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/ports.h"
#include "launcher/supervisor.h"
#include "logging/log.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 127;
constexpr int kExitError = 1;
constexpr std::size_t kJobIdBytes = 8;
constexpr std::size_t kJobSecretBytes = 16;

int cores() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int run(int argc, char** argv) {
  using namespace ddl;
  using namespace ddl::launcher;

  const LaunchOptions options = parse_options(argc, argv);
  if (options.help) {
    std::cout << help_text();
    return 0;
  }
  if (options.version) {
    std::cout << version_text() << "\n";
    return 0;
  }
  spdlog::set_level(options.log_level);

  const env::EnvMap caller_env = env::current_environment();
  const std::string executable = find_worker(options.worker, launcher_directory(), caller_env);

  PlanInputs inputs;
  inputs.cores = cores();
  inputs.caller_env = caller_env;
  // Every start of the job uses the endpoints of the first: other nodes know only those, and the
  // store binds with SO_REUSEADDR, so a port of a reaped generation is free again at once.
  std::vector<std::uint16_t> first_ports;
  inputs.pick_ports = [&first_ports](const std::string& host, int count) {
    if (first_ports.empty()) first_ports = pick_free_ports(host, count);
    return first_ports;
  };
  const std::string job_id = random_hex(kJobIdBytes);
  inputs.job_secret = random_hex(kJobSecretBytes);

  // Each start is a new rendezvous generation with its own job id, so the store refuses a late
  // client of an earlier one instead of mixing it in.
  auto plan_for = [&](int restart_count) {
    PlanInputs in = inputs;
    in.restart_count = restart_count;
    in.job_id = generation_job_id(job_id, restart_count);
    return make_plan(options, in);
  };
  const ClusterPlan plan = plan_for(0);

  if (options.print_config) {
    std::cout << describe_options(options) << describe_plan(plan) << std::flush;
  }
  if (plan.omp_threads_defaulted) {
    spdlog::info("{} is not set: giving each of the {} worker(s) {}={} ({} cores)",
                 env::kOmpNumThreads, plan.local.size(), env::kOmpNumThreads,
                 *plan.omp_threads_defaulted, inputs.cores);
  }

  auto launches_of = [&](const ClusterPlan& p) {
    std::vector<WorkerLaunch> launches;
    for (const WorkerSpec& spec : p.local) {
      WorkerLaunch l;
      l.rank = spec.contract.rank;
      l.executable = executable;
      l.args = options.worker_args;
      l.env = merge_env(caller_env, spec.env);
      launches.push_back(std::move(l));
    }
    return launches;
  };
  const GenerationFactory generations = [&](int restart_count) {
    if (restart_count == 0) return launches_of(plan);
    spdlog::debug("restart {}: job id {}", restart_count,
                  generation_job_id(job_id, restart_count));
    return launches_of(plan_for(restart_count));
  };
  SupervisorOptions sup;
  sup.log_dir = options.log_dir;
  sup.quiet = options.quiet;
  sup.kill_timeout = options.kill_timeout;
  sup.max_restarts = options.max_restarts;
  sup.hang_timeout = options.hang_timeout;
  spdlog::debug("job {}: world size {}", job_id, plan.world_size);
  return supervise(generations, sup).exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // A console that went away must not kill the launcher (and with it the job): writes fail with
  // EPIPE instead. Workers get the default disposition back before exec.
  ::signal(SIGPIPE, SIG_IGN);
  ddl::logging::init("launch", spdlog::level::info);
  try {
    return run(argc, argv);
  } catch (const ddl::launcher::OptionsError& e) {
    spdlog::error("bad command line: {}", e.what());
    return kExitUsage;
  } catch (const ddl::launcher::WorkerNotFoundError& e) {
    spdlog::error("{}", e.what());
    return kExitNotFound;
  } catch (const ddl::launcher::PlanError& e) {
    spdlog::error("cannot plan the job: {}", e.what());
    return kExitUsage;
  } catch (const ddl::launcher::PortError& e) {
    spdlog::error("{}", e.what());
    return kExitError;
  } catch (const ddl::launcher::SupervisorError& e) {
    spdlog::error("{}", e.what());
    return kExitError;
  } catch (const ddl::env::EnvError& e) {
    spdlog::error("environment contract: {}", e.what());
    return kExitError;
  } catch (const std::exception& e) {
    spdlog::error("unexpected error: {}", e.what());
    return kExitError;
  }
}
