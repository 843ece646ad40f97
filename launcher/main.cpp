// `launch [options] WORKER [WORKER ARGS...]`: starts this node's workers of a data-parallel job
// and supervises them (see launcher/options/options.h, plan.h, supervisor.h).
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

#include <filesystem>
#include <memory>

#include "env/contract.h"
#include "launcher/coord/control.h"
#include "launcher/options/options.h"
#include "launcher/cluster/plan.h"
#include "net/ports.h"
#include "launcher/supervise/supervisor.h"
#include "launcher/cluster/topology.h"
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

// DDL_JOB_ID / DDL_JOB_SECRET from the caller, when set and not empty.
std::optional<std::string> non_empty(const ddl::env::EnvMap& env, const char* name) {
  auto value = ddl::env::lookup(env, name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

// What every node of a multi-node job must agree on (launcher/coord/control.h compares it).
ddl::launcher::JobDescription describe_job(const ddl::launcher::LaunchOptions& options,
                                           const ddl::launcher::NodeTopology& topology) {
  std::string hosts;
  for (const auto& h : topology.hosts) hosts += (hosts.empty() ? "" : ",") + h;
  return {
      {"nnodes", std::to_string(topology.nnodes)},
      {"node list", hosts.empty() ? std::string("(each node publishes its own)") : hosts},
      {"nproc_per_node", std::to_string(options.nproc_per_node)},
      {"started_port", options.started_port ? std::to_string(*options.started_port) : "None"},
      {"worker program", std::filesystem::path(options.worker).filename().string()},
      {"control store", topology.control.str()},
  };
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

  const NodeTopology topology = resolve_topology(options, caller_env);

  PlanInputs inputs;
  inputs.cores = cores();
  inputs.caller_env = caller_env;
  // Every start of the job uses the endpoints of the first: other nodes know only those, and the
  // store binds with SO_REUSEADDR, so a port of a reaped generation is free again at once.
  std::vector<std::uint16_t> first_ports;
  inputs.pick_ports = [&first_ports](const std::string& host, int count) {
    if (first_ports.empty()) first_ports = net::pick_free_ports(host, count);
    return first_ports;
  };
  // The job's identity must be the same on every node: the caller's DDL_JOB_ID / DDL_JOB_SECRET
  // when set; otherwise a single node makes its own, and a multi-node job takes node 0's job id
  // through the control store and requires the secret from the caller (it also admits the
  // launchers to that store, so it cannot travel through it).
  const std::optional<std::string> caller_job_id = non_empty(caller_env, env::kJobId);
  const std::optional<std::string> caller_secret = non_empty(caller_env, env::kJobSecret);
  std::string job_id = caller_job_id.value_or(random_hex(kJobIdBytes));
  inputs.job_secret = caller_secret.value_or(random_hex(kJobSecretBytes));

  std::unique_ptr<ControlChannel> control;
  if (topology.multi_node()) {
    if (!caller_secret) {
      throw PlanError(std::string("a job of ") + std::to_string(topology.nnodes) + " nodes (from " +
                      topology.source + ") needs the same " + env::kJobSecret +
                      " on every node: it admits the launchers to node 0's control store and the "
                      "workers to their store. Set it before starting launch on each node, e.g. "
                      "export " + env::kJobSecret + "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                      "(srun passes the caller's environment on)");
    }
    ControlOptions control_options;
    control_options.endpoint = topology.control;
    control_options.job_id = caller_job_id ? *caller_job_id + "/control" : "ddl-control";
    control_options.secret = *caller_secret;
    control_options.node_rank = topology.node_rank;
    control_options.nnodes = topology.nnodes;
    control_options.rendezvous_timeout =
        options.rendezvous_timeout.value_or(env::kDefaultRendezvousTimeout);
    control_options.linger_timeout = options.kill_timeout + std::chrono::seconds(5);
    spdlog::info("node {} of {} ({}); control store at {}", topology.node_rank, topology.nnodes,
                 topology.source, topology.control.str());
    control = std::make_unique<ControlChannel>(control_options);

    ControlChannel::Agreement agreement;
    try {
      const std::string host =
          topology.local_host
              ? *topology.local_host
              : net::route_address_towards(topology.control.host, topology.control.port);
      std::vector<env::Endpoint> local;
      const std::vector<std::uint16_t> ports =
          options.started_port ? std::vector<std::uint16_t>{}
                               : net::pick_free_ports(net::resolve_ipv4(host), options.nproc_per_node);
      for (int i = 0; i < options.nproc_per_node; ++i) {
        local.push_back(env::Endpoint{
            host, options.started_port ? static_cast<std::uint16_t>(*options.started_port + i)
                                       : ports[i]});
      }
      agreement = control->rendezvous(describe_job(options, topology), local, job_id);
    } catch (const std::exception&) {
      control->abandon();
      throw;
    }
    job_id = agreement.job_id;
    inputs.cluster_endpoints = agreement.endpoints;
    inputs.node_rank = topology.node_rank;
    spdlog::info("node {}: all {} node(s) agree; world size {}", topology.node_rank,
                 topology.nnodes, agreement.endpoints.size());
  }

  // Each start is a new rendezvous generation with its own job id, so the store refuses a late
  // client of an earlier one instead of mixing it in.
  auto plan_for = [&](int restart_count) {
    PlanInputs in = inputs;
    in.restart_count = restart_count;
    in.job_id = generation_job_id(job_id, restart_count);
    return make_plan(options, in);
  };
  // From here on a multi-node job is running elsewhere: a failure to start here must stop it.
  auto fail_here = [&](const std::string& what) {
    if (!control) return;
    control->report_failure(FailureNotice{std::nullopt, kExitError, what});
    control->finish();
  };
  ClusterPlan plan;
  try {
    plan = plan_for(0);
  } catch (const std::exception& e) {
    fail_here(std::string("cannot plan the job: ") + e.what());
    throw;
  }

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
  if (!control) return supervise(generations, sup).exit_code;

  JobOutcome outcome;
  try {
    auto stop = std::make_shared<ExternalStop>();
    control->watch(stop);
    sup.external_stop = stop;
    sup.on_failure = [&control](const FailureNotice& notice) { control->report_failure(notice); };
    outcome = supervise(generations, sup);
  } catch (const std::exception& e) {
    fail_here(e.what());
    throw;
  }
  const std::optional<FailureRecord> failure = control->finish();
  int exit_code = outcome.exit_code;
  if (failure) {
    spdlog::error("the job failed on {}; first failure: {}",
                  failure->node == topology.node_rank ? std::string("this node")
                                                      : "node " + std::to_string(failure->node),
                  failure->str());
    if (exit_code == 0) exit_code = failure->exit_code != 0 ? failure->exit_code : kExitError;
  }
  return exit_code;
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
  } catch (const ddl::launcher::ControlError& e) {
    spdlog::error("cannot form the multi-node job: {}", e.what());
    return kExitUsage;
  } catch (const ddl::net::PortError& e) {
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
