#include "launcher/job/job.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "launcher/cluster/generation.h"
#include "launcher/cluster/plan.h"
#include "launcher/cluster/topology.h"
#include "launcher/coord/control.h"
#include "launcher/job/job_config.h"
#include "launcher/report/run_report.h"
#include "launcher/supervise/cpu_binding.h"
#include "launcher/supervise/supervisor.h"
#include "launcher/supervise/worker_lookup.h"
#include "net/ports.h"

namespace ddl::launcher {

namespace {

constexpr std::size_t kJobIdBytes = 8;
constexpr std::size_t kJobSecretBytes = 16;

// A private folder for the launcher's scratch files (the workers' error files when there is no
// --log_dir), removed with everything in it when the job ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddlaunch-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw SupervisorError("cannot create a scratch folder from " + pattern + ": " +
                            std::strerror(errno));
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// DDL_JOB_ID / DDL_JOB_SECRET from the caller, when set and not empty.
std::optional<std::string> non_empty(const env::EnvMap& env, const char* name) {
  auto value = env::lookup(env, name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

// What every node of a multi-node job must agree on (launcher/coord/control.h compares it).
JobDescription describe_job(const LaunchOptions& options, const NodeTopology& topology) {
  std::string hosts;
  for (const auto& h : topology.hosts) hosts += (hosts.empty() ? "" : ",") + h;
  JobDescription description = {
      {"nnodes", topology.elastic() ? std::to_string(topology.min_nnodes) + ":" +
                                          std::to_string(topology.nnodes)
                                    : std::to_string(topology.nnodes)},
      {"node list", hosts.empty() ? std::string("(each node publishes its own)") : hosts},
      // A rank mapping gives nodes different worker counts; then the mapping itself must agree.
      options.rank_mapping ? JobDescription::value_type{"rank mapping", options.rank_mapping->str()}
                           : JobDescription::value_type{"nproc_per_node",
                                                        std::to_string(options.nproc_per_node)},
      {"started_port", options.started_port ? std::to_string(*options.started_port) : "None"},
      {"worker program", std::filesystem::path(options.worker).filename().string()},
      {"control store", topology.control.str()},
      {"max_restarts", std::to_string(options.max_restarts)},
  };
  // Only a parameter-server job has servers to agree on; a collective job's description is as
  // it always was.
  if (options.ps_job()) description.push_back({"server_num", std::to_string(options.server_num)});
  return description;
}

// With --servers/--workers every node runs its own launch, with no control store between them:
// when the lists span several hosts, their processes can only find each other with one job id
// and secret given to every node.
void check_explicit_identity(const LaunchOptions& options,
                             const std::optional<std::string>& caller_job_id,
                             const std::optional<std::string>& caller_secret) {
  if (!options.explicit_endpoints()) return;
  std::set<std::string> hosts;
  for (const auto* list : {&options.servers, &options.workers}) {
    for (const env::Endpoint& e : *list) hosts.insert(e.host);
  }
  if (hosts.size() < 2 || (caller_job_id && caller_secret)) return;
  std::string missing;
  if (!caller_job_id) missing = env::kJobId;
  if (!caller_secret) missing += (missing.empty() ? "" : " and ") + std::string(env::kJobSecret);
  throw PlanError("--servers/--workers span " + std::to_string(hosts.size()) +
                  " hosts, each running its own launch: set the same " + env::kJobId + " and " +
                  env::kJobSecret + " on every one of them (not set here: " + missing + ")");
}

// A generation's members become the plan's endpoints and this node's place among them.
void use_membership(const Membership& membership, PlanInputs& inputs) {
  inputs.cluster_endpoints = membership.endpoints;
  inputs.node_rank = membership.position;
  std::string nodes;
  for (int n : membership.nodes) nodes += (nodes.empty() ? "" : ", ") + std::to_string(n);
  spdlog::debug("generation {}: nodes {}; this node is number {} of them",
                membership.generation.index(), nodes, membership.position);
}

// A multi-node job needs the same job secret from the caller on every node.
void require_job_secret(const NodeTopology& topology,
                        const std::optional<std::string>& caller_secret) {
  if (caller_secret) return;
  throw PlanError(std::string("a job of ") + std::to_string(topology.nnodes) + " nodes (from " +
                  topology.source + ") needs the same " + env::kJobSecret +
                  " on every node: it admits the launchers to node 0's control store and the "
                  "workers to their store. Set it before starting launch on each node, e.g. "
                  "export " +
                  env::kJobSecret +
                  "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                  "(srun passes the caller's environment on; mpirun needs -x " +
                  env::kJobSecret + " on other machines)");
}

// How this node reaches node 0's control store; says which node this is.
ControlOptions control_options_for(const LaunchOptions& options, const NodeTopology& topology,
                                   const std::optional<std::string>& caller_job_id,
                                   const std::string& secret) {
  ControlOptions control_options;
  control_options.endpoint = topology.control;
  control_options.job_id = caller_job_id ? *caller_job_id + "/control" : "ddl-control";
  control_options.secret = secret;
  control_options.node_rank = topology.node_rank;
  control_options.nnodes = topology.nnodes;
  control_options.min_nnodes = topology.min_nnodes;
  control_options.max_restarts = options.max_restarts;
  control_options.last_call_timeout = options.last_call_timeout;
  control_options.rendezvous_timeout =
      options.rendezvous_timeout.value_or(env::kDefaultRendezvousTimeout);
  control_options.linger_timeout = options.kill_timeout + std::chrono::seconds(5);
  control_options.equal_node_sizes = !options.rank_mapping;
  if (topology.auto_node_rank) {
    control_options.node_rank = kAutoNodeRank;
    spdlog::info("node ? of {} ({}, no node rank given: node 0 hands them out); control store at {}",
                 topology.nnodes, topology.source, topology.control.str());
  } else {
    spdlog::info("node {} of {} ({}); control store at {}", topology.node_rank, topology.nnodes,
                 topology.source, topology.control.str());
  }
  return control_options;
}

// The endpoints this node publishes to the others: its address (given, node 0's --master_addr
// in torchrun's static spelling, or the route towards the control store) and its ports.
std::vector<env::Endpoint> published_endpoints(const LaunchOptions& options,
                                               const JobConfig& config,
                                               const NodeTopology& topology) {
  // torchrun's static spelling: node 0's rank 0 is MASTER_ADDR:MASTER_PORT as given.
  const bool hosts_master = options.workers_master() && topology.node_rank == 0;
  std::string host;
  if (topology.local_host) {
    host = *topology.local_host;
  } else if (hosts_master) {
    host = *options.master_addr;
  } else {
    host = net::route_address_towards(topology.control.host, topology.control.port);
  }
  std::vector<std::uint16_t> ports =
      config.started_port
          ? std::vector<std::uint16_t>{}
          : net::pick_free_ports(net::resolve_ipv4(host), local_endpoint_count(config));
  if (hosts_master && !ports.empty()) {
    put_port_first(ports, static_cast<std::uint16_t>(options.workers_master_port()));
  }
  return local_endpoints(config, host, ports);
}

// What the nodes agreed on, once the first generation is joined.
void log_agreement(const JobConfig& config, const NodeTopology& topology,
                   const PlanInputs& inputs) {
  const int nodes = config.rank_mapping
                        ? static_cast<int>(config.rank_mapping->nodes.size())
                        : static_cast<int>(inputs.cluster_endpoints->size()) /
                              std::max(1, local_endpoint_count(config));
  if (config.ps_job()) {
    spdlog::info("node {}: all {} node(s) agree; {} server(s), {} trainer(s)", topology.node_rank,
                 nodes, config.server_num * nodes, config.worker_num * nodes);
  } else {
    spdlog::info("node {}: {} {} node(s) agree{}; world size {}", topology.node_rank,
                 nodes == topology.nnodes ? "all" : "the", nodes,
                 topology.elastic() ? " (elastic, " + std::to_string(topology.min_nnodes) + ".." +
                                          std::to_string(topology.nnodes) + ")"
                                    : std::string(),
                 inputs.cluster_endpoints->size());
  }
}

// Joins the other nodes through node 0's control store; fills the job id, the endpoints and the
// first generation this node runs (a later one for a node admitted into a running elastic job).
std::unique_ptr<ControlChannel> form_multi_node_job(const LaunchOptions& options,
                                                    const JobConfig& config, NodeTopology& topology,
                                                    const std::optional<std::string>& caller_job_id,
                                                    const std::optional<std::string>& caller_secret,
                                                    std::string& job_id, PlanInputs& inputs,
                                                    Generation& first,
                                                    std::shared_ptr<ExternalStop> stop) {
  require_job_secret(topology, caller_secret);
  auto control = std::make_unique<ControlChannel>(
      control_options_for(options, topology, caller_job_id, *caller_secret));
  topology.node_rank = control->node_rank();

  try {
    const std::vector<env::Endpoint> local = published_endpoints(options, config, topology);
    const ControlChannel::Agreement agreement =
        control->rendezvous(describe_job(options, topology), local, job_id);
    job_id = agreement.job_id;
    // Heartbeats from here on: node 0 must not take this node for lost while it waits for the
    // first generation (a node admitted late into an elastic job may wait long).
    control->watch(std::move(stop));
    const Membership membership = control->join_generation(Generation());
    use_membership(membership, inputs);
    first = membership.generation;
  } catch (const std::exception&) {
    control->abandon();
    throw;
  }
  log_agreement(config, topology, inputs);
  return control;
}

// What this node's console shows. With --log_dir: this node's local rank 0 (Paddle 1.8 echoes
// each node's first trainer), or the --local_ranks_filter ranks, and the --tee ranks as well;
// servers only go to their logs. Without: every process, or the --local_ranks_filter trainers.
bool shown_on_console(const LaunchOptions& options, const PlannedWorker& spec) {
  const bool trainer = spec.contract.role == env::Role::kTrainer;
  const int local = spec.contract.local_rank;
  if (!options.log_dir) {
    return !trainer || !options.local_ranks_filter || options.local_ranks_filter->contains(local);
  }
  if (!trainer) return false;
  const bool chosen =
      options.local_ranks_filter ? options.local_ranks_filter->contains(local) : local == 0;
  return chosen || options.tee.contains(local);
}

// Says which flag defaults came from the environment (torchrun's PET_<FLAG>, Paddle's
// PADDLE_<FLAG>), when any did.
void log_environment_defaults(const LaunchOptions& options) {
  if (options.from_environment.empty()) return;
  std::string used;
  for (const auto& v : options.from_environment) used += (used.empty() ? "" : ", ") + v;
  spdlog::info("flag defaults from the environment (torchrun's PET_<FLAG>, Paddle's "
               "PADDLE_<FLAG>): {}",
               used);
}

// How WORKER is run (launcher/supervise/worker_lookup.h).
WorkerCommand resolve_worker(const LaunchOptions& options, const JobContext& context) {
  WorkerCommand command = worker_command(
      WorkerChoice{options.worker, options.module, options.no_python, options.run_path,
                   options.python},
      context.launcher_dir, context.caller_env);
  if (command.python) {
    spdlog::debug("running {} as {} -u {}{}", options.worker, command.executable,
                  options.module ? "-m " : "", options.worker);
  }
  return command;
}

// The processes of `plan` as the supervisor starts them: WORKER with its arguments, in the
// caller's environment with the plan's variables on top.
std::vector<Worker> launches_of(const ClusterPlan& plan, const LaunchOptions& options,
                                const WorkerCommand& command, const env::EnvMap& caller_env) {
  std::vector<Worker> launches;
  const std::vector<std::vector<int>> cpus =
      options.bind == CpuBind::kNone
          ? std::vector<std::vector<int>>(plan.local.size())
          : assign_cpus(options.bind, read_cpu_topology(), static_cast<int>(plan.local.size()));
  for (const PlannedWorker& spec : plan.local) {
    Worker l;
    l.role = spec.contract.role;
    l.index = spec.contract.rank;
    l.echo = shown_on_console(options, spec);
    l.executable = command.executable;
    l.args = command.args;
    l.args.insert(l.args.end(), options.worker_args.begin(), options.worker_args.end());
    l.env = merge_env(caller_env, spec.env, spec.removed);
    l.cpus = cpus[launches.size()];
    launches.push_back(std::move(l));
  }
  // Lines of several processes on one console need their names.
  const auto shown =
      std::count_if(launches.begin(), launches.end(), [](const Worker& l) { return *l.echo; });
  for (Worker& l : launches) l.prefix_echo = shown > 1;
  return launches;
}

// How the supervisor runs this node's processes, short of a multi-node job's hooks and the run
// report.
SupervisorOptions supervisor_options(const LaunchOptions& options, const NodeTopology& topology,
                                     Generation first_generation) {
  SupervisorOptions sup;
  sup.log_dir = options.log_dir;
  sup.append_logs = !options.log_overwrite;
  sup.quiet = options.quiet;
  sup.kill_timeout = options.kill_timeout;
  sup.restart_policy = RestartPolicy(options.max_restarts);
  sup.hang_timeout = options.hang_timeout;
  sup.server_grace = options.server_grace_or_default();
  sup.first_generation = first_generation;
  sup.indices_may_change = topology.elastic();
  return sup;
}

// One run of the job on this node: run_job()'s steps, in the order run() takes them, and what
// they hand each other. The members are declared in the order the steps make them, so they go
// in reverse: the run report first, the control connection last.
class JobRun {
 public:
  JobRun(const LaunchOptions& options, const JobContext& context)
      : options_(options), context_(context), config_(job_config(options)) {}
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  int run() {
    log_environment_defaults(options_);
    command_ = resolve_worker(options_, context_);
    topology_ = resolve_topology(options_, context_.caller_env);  // node rank: maybe assigned below
    prepare_inputs();
    fix_identity();
    if (topology_.multi_node()) {
      control_ = form_multi_node_job(options_, config_, topology_, caller_job_id_, caller_secret_,
                                     job_id_, inputs_, first_generation_, stop_);
    }
    inputs_.job_id = job_id_;
    choose_error_file_dir();
    plan_first_generation();
    show_plan();

    const GenerationFactory generations = [this](Generation generation) {
      return launches_for(generation);
    };
    SupervisorOptions sup = supervisor_options(options_, topology_, first_generation_);
    add_report(sup);
    spdlog::debug("job {}: world size {}", job_id_, plan_.world_size);
    if (!control_) return supervise(generations, sup).exit_code;
    return supervise_with_nodes(generations, sup);
  }

 private:
  // What every generation's plan starts from: the machine, the caller's environment, the ports.
  void prepare_inputs() {
    inputs_.cores = context_.cores;
    inputs_.caller_env = context_.caller_env;
    // Every generation uses the endpoints of the first: other nodes know only those, and the
    // store binds with SO_REUSEADDR, so a port of a reaped generation is free again at once.
    inputs_.pick_ports = [this](const std::string& host, int count) {
      if (first_ports_.empty()) first_ports_ = net::pick_free_ports(host, count);
      return first_ports_;
    };
  }

  // The job's identity must be the same on every node: the caller's DDL_JOB_ID / DDL_JOB_SECRET
  // when set; otherwise a single node makes its own, and a multi-node job takes node 0's job id
  // through the control store and requires the secret from the caller (it also admits the
  // launchers to that store, so it cannot travel through it).
  void fix_identity() {
    caller_job_id_ = non_empty(context_.caller_env, env::kJobId);
    caller_secret_ = non_empty(context_.caller_env, env::kJobSecret);
    check_explicit_identity(options_, caller_job_id_, caller_secret_);
    job_id_ = caller_job_id_.value_or(random_hex(kJobIdBytes));
    inputs_.job_secret = caller_secret_.value_or(random_hex(kJobSecretBytes));
  }

  // torchrun's error files (TORCHELASTIC_ERROR_FILE): in LOG_DIR, else in a scratch folder.
  void choose_error_file_dir() {
    if (options_.log_dir) {
      inputs_.error_file_dir = std::filesystem::absolute(*options_.log_dir).string();
    } else {
      scratch_.emplace();
      inputs_.error_file_dir = scratch_->path();
    }
  }

  // Each generation is a new rendezvous with its own job id (launcher/cluster/generation.h); in
  // a multi-node job every node joins it together, and node 0 says who takes part.
  ClusterPlan plan_for(Generation generation) {
    if (control_ && generation != first_generation_) {
      const Membership membership = control_->join_generation(generation);
      if (membership.generation != generation) {
        throw ControlError("node 0 formed generation " + std::to_string(generation.index()) +
                           " without this node");
      }
      use_membership(membership, inputs_);
    }
    PlanInputs in = inputs_;
    in.generation = generation;
    return make_plan(config_, in);
  }

  // Once the nodes agreed, a multi-node job is running elsewhere: a failure to start (or go on)
  // here must stop it.
  void fail_here(const std::string& what) {
    if (!control_) return;
    control_->report_failure(FailureNotice{std::nullopt, kExitError, what});
    control_->finish();
  }

  // The first generation's plan; the other nodes hear of a failure to make it.
  void plan_first_generation() {
    try {
      plan_ = plan_for(first_generation_);
    } catch (const std::exception& e) {
      fail_here(std::string("cannot plan the job: ") + e.what());
      throw;
    }
  }

  // --print_config, and the OMP_NUM_THREADS default the plan chose.
  void show_plan() const {
    std::ostream& config_out = context_.config_out ? *context_.config_out : std::cout;
    if (options_.print_config) {
      config_out << describe_options(options_) << describe_plan(plan_) << std::flush;
    }
    if (options_.bind != CpuBind::kNone) {
      const std::vector<Worker> first = launches_of(plan_, options_, command_, context_.caller_env);
      std::string pins;
      for (const Worker& w : first) {
        pins += (pins.empty() ? "" : ", ") + w.name() + " on CPUs " + cpu_list_text(w.cpus);
      }
      spdlog::info("--bind={}: {}", cpu_bind_name(options_.bind), pins);
    }
    if (plan_.omp_threads_defaulted) {
      spdlog::info("{} is not set: giving each of the {} worker(s) {}={} ({} cores)",
                   env::kOmpNumThreads, plan_.local.size(), env::kOmpNumThreads,
                   *plan_.omp_threads_defaulted, inputs_.cores);
    }
  }

  // The supervisor's GenerationFactory: the first plan, then a new plan for every restart.
  std::vector<Worker> launches_for(Generation generation) {
    if (generation == first_generation_) {
      return launches_of(plan_, options_, command_, context_.caller_env);
    }
    spdlog::debug("restart {}: job id {}", generation.index(), generation.job_id(job_id_));
    return launches_of(plan_for(generation), options_, command_, context_.caller_env);
  }

  // The run report (--report, with --log_dir), fed by the supervisor.
  void add_report(SupervisorOptions& sup) {
    if (!options_.report || !options_.log_dir) return;
    RunReport::JobInfo info;
    info.job_id = job_id_;
    info.worker = command_.python ? options_.worker : command_.executable;
    info.node_rank = topology_.node_rank;
    info.nnodes = topology_.nnodes;
    report_ = std::make_unique<RunReport>(info);
    sup.report = report_.get();
  }

  // A multi-node job: the supervisor tells the other nodes of failures and successes through
  // the control connection; the job's exit code is this node's, or the first failure's
  // elsewhere.
  int supervise_with_nodes(const GenerationFactory& generations, SupervisorOptions& sup) {
    JobOutcome outcome;
    try {
      sup.external_stop = stop_;
      sup.on_failure = [this](const FailureNotice& notice) { control_->report_failure(notice); };
      sup.on_generation_failure = [this](Generation g, const FailureNotice& notice) {
        control_->report_generation_failure(g, notice);
      };
      sup.on_generation_success = [this](Generation g) { control_->report_generation_success(g); };
      outcome = supervise(generations, sup);
    } catch (const std::exception& e) {
      fail_here(e.what());
      throw;
    }
    const std::optional<FailureRecord> failure = control_->finish();
    int exit_code = outcome.exit_code;
    if (failure) {
      spdlog::error("the job failed on {}; first failure: {}",
                    failure->node == topology_.node_rank ? std::string("this node")
                                                         : "node " + std::to_string(failure->node),
                    failure->str());
      if (exit_code == 0) exit_code = failure->exit_code != 0 ? failure->exit_code : kExitError;
    }
    return exit_code;
  }

  const LaunchOptions& options_;
  const JobContext& context_;
  const JobConfig config_;  // what the planner reads of options_
  WorkerCommand command_;
  NodeTopology topology_;
  PlanInputs inputs_;
  std::vector<std::uint16_t> first_ports_;  // the ports of the first generation, once picked
  std::optional<std::string> caller_job_id_;
  std::optional<std::string> caller_secret_;
  std::string job_id_;
  std::unique_ptr<ControlChannel> control_;  // a multi-node job's
  Generation first_generation_;
  std::shared_ptr<ExternalStop> stop_ = std::make_shared<ExternalStop>();
  std::optional<ScratchDir> scratch_;
  ClusterPlan plan_;  // the first generation's
  std::unique_ptr<RunReport> report_;
};

}  // namespace

int online_cores() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int run_job(const LaunchOptions& options, const JobContext& context) {
  return JobRun(options, context).run();
}

ErrorExit launch_exit_for(const std::exception& error) {
  const std::string what = error.what();
  if (dynamic_cast<const env::EnvError*>(&error)) {
    return {kExitError, "environment contract: " + what};
  }
  // The launcher's own errors end it with 1, 2 or 127; a worker-side one (a store or collective
  // error that escaped the control connection's handling) is as unexpected as a foreign one.
  const auto* typed = dynamic_cast<const Error*>(&error);
  const bool launchers = typed && (typed->exit_code() == kExitError ||
                                   typed->exit_code() == kExitUsage ||
                                   typed->exit_code() == kExitNotFound);
  if (!launchers) return {kExitError, "unexpected error: " + what};
  return ddl::exit_for(error);
}

}  // namespace ddl::launcher
