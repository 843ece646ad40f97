#include "launcher/job/job.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "env/file.h"
#include "env/host.h"
#include "env/slurm.h"
#include "env/text.h"
#include "launcher/cluster/generation.h"
#include "launcher/cluster/plan.h"
#include "launcher/cluster/static_job.h"
#include "launcher/cluster/topology.h"
#include "launcher/coord/control_plane.h"
#include "launcher/coord/munge_auth.h"
#include "launcher/diagnose/gpu_log.h"
#include "launcher/job/identity.h"
#include "launcher/preflight/check.h"
#include "launcher/report/run_report.h"
#include "launcher/supervise/cpu_binding.h"
#include "launcher/supervise/numa_binding.h"
#include "launcher/supervise/supervisor.h"
#include "launcher/supervise/worker_lookup.h"
#include "logging/log.h"
#include "net/ports.h"

namespace ddl::launcher {

namespace {

constexpr std::size_t kJobIdBytes = 8;

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

// What every node of a multi-node job must agree on (launcher/coord/engine.h compares it).
JobDescription describe_job(const LaunchOptions& options, const NodeTopology& topology) {
  std::string hosts;
  for (const auto& h : topology.hosts) hosts += (hosts.empty() ? "" : ",") + h;
  JobDescription description = {
      {"nnodes", topology.elastic()
                     ? std::to_string(topology.min_nnodes) + ":" + std::to_string(topology.nnodes)
                     : std::to_string(topology.nnodes)},
      {"node list", hosts.empty() ? std::string("(each node publishes its own)") : hosts},
      // A rank mapping gives nodes different worker counts; then the mapping itself must agree.
      options.rank_mapping
          ? JobDescription::value_type{"rank mapping", options.rank_mapping->str()}
          : JobDescription::value_type{"nproc_per_node", std::to_string(options.nproc_per_node)},
      {"started_port", options.started_port ? std::to_string(*options.started_port) : "None"},
      {"worker program", std::filesystem::path(options.worker).filename().string()},
      // Nodes may reach an etcd cluster through different members: only "etcd" must agree.
      {"control store", topology.etcd() ? std::string("etcd") : topology.control.str()},
      {"max_restarts", std::to_string(options.max_restarts)},
  };
  // Only a parameter-server job has servers to agree on; a collective job's description is as
  // it always was.
  if (options.ps_job()) description.push_back({"server_num", std::to_string(options.server_num)});
  if (!options.heter.empty()) {
    std::string stages;
    for (const auto& stage : options.heter) {
      stages += (stages.empty() ? "" : ";") + std::to_string(stage.count) + " " + stage.device;
    }
    description.push_back({"heter workers", stages});
  }
  return description;
}

// With --servers/--workers every node runs its own launch, with no control store between them:
// the number of hosts the lists name.
int listed_hosts(const LaunchOptions& options) {
  std::set<std::string> hosts;
  for (const auto* list : {&options.servers, &options.workers}) {
    for (const env::Endpoint& e : *list) hosts.insert(e.host);
  }
  return static_cast<int>(hosts.size());
}

// What every node of a static job is given alike, for its derived job id: the program, the
// counts and every endpoint.
std::string static_description(const LaunchOptions& options,
                               const std::vector<env::Endpoint>& endpoints) {
  return "worker=" + std::filesystem::path(options.worker).filename().string() +
         ";nproc=" + std::to_string(options.nproc_per_node) +
         ";servers=" + std::to_string(options.server_num) +
         ";endpoints=" + env::join_endpoints(endpoints);
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

// The control store's job id: the same on every node.
std::string control_job_id(const std::optional<std::string>& caller_job_id) {
  return caller_job_id ? *caller_job_id + "/control" : "ddl-control";
}

// Under Slurm without DDL_JOB_SECRET (IdentityMode::kMunge), the launchers admit each other with
// munge credentials: Slurm's munged shares one key across the cluster, so a credential node 0's
// munged decodes comes from this cluster, and its payload binds it to this Slurm job and control
// store. The workers' secret then comes from node 0 through that store. Throws PlanError when
// munged cannot be reached.
std::shared_ptr<const MungeAdmission> munge_admission(
    const NodeTopology& topology, const env::EnvMap& env,
    const std::optional<std::string>& caller_job_id) {
  const std::string slurm_job = env::lookup(env, env::kSlurmJobId).value_or("");
  MungeClient client(find_munge_socket(env));
  try {
    client.encode("");  // munged answers: the others' credentials can be checked too
  } catch (const MungeError& e) {
    throw PlanError("a job of " + std::to_string(topology.nnodes) + " nodes (from " +
                    topology.source + ") without " + env::kJobSecret +
                    " admits its launchers with munge credentials, but munge cannot be used: " +
                    e.what() + ". Set " + env::kMungeSocket + " to munged's socket, or the same " +
                    env::kJobSecret + " on every node");
  }
  spdlog::info(
      "no {}: the launchers of Slurm job {} admit each other with munge credentials "
      "({}); node 0 hands out the workers' secret",
      env::kJobSecret, slurm_job, client.where());
  return std::make_shared<const MungeAdmission>(
      std::move(client),
      "slurm job " + slurm_job + ", control store '" + control_job_id(caller_job_id) + "'");
}

// Where the control plane is, for messages: node 0's control store, or the etcd cluster.
std::string control_plane_where(const NodeTopology& topology) {
  return topology.etcd() ? "etcd " + env::join_endpoints(topology.etcd()->endpoints)
                         : topology.control.str();
}

// How this node reaches node 0's control store (or the etcd cluster); says which node this is.
ControlOptions control_options_for(const LaunchOptions& options, const NodeTopology& topology,
                                   const std::optional<std::string>& caller_job_id,
                                   const std::string& secret,
                                   std::shared_ptr<const MungeAdmission> munge) {
  ControlOptions control_options;
  control_options.endpoint = topology.control;
  if (topology.etcd()) control_options.etcd_endpoints = topology.etcd()->endpoints;
  control_options.etcd_security = options.etcd_security;
  control_options.job_id = control_job_id(caller_job_id);
  if (topology.etcd()) {
    // The job's keys in etcd are named after the id the user gave (torchrun's --rdzv_id,
    // Paddle's --job_id), so that jobs sharing an etcd cluster stay apart.
    control_options.job_id =
        options.rdzv_id.value_or(options.job_id.value_or(caller_job_id.value_or("default")));
  }
  control_options.secret = munge ? std::string() : secret;
  control_options.munge = std::move(munge);
  control_options.node_rank = topology.node_rank;
  control_options.nnodes = topology.nnodes;
  control_options.min_nnodes = topology.min_nnodes;
  control_options.max_restarts = options.max_restarts;
  control_options.last_call_timeout = options.last_call_timeout;
  control_options.rendezvous_timeout =
      options.rendezvous_timeout.value_or(env::kDefaultRendezvousTimeout);
  control_options.linger_timeout = options.kill_timeout + std::chrono::seconds(5);
  control_options.equal_node_sizes = !options.rank_mapping;
  control_options.order_by_address = options.sort_ip;
  control_options.paddle_elastic = options.paddle_elastic;
  // Paddle's fault-tolerance level: a lost node is waited for (its pod is started again).
  control_options.wait_for_replacement = options.fleet_level == kFleetFaultTolerance;
  if (options.paddle_elastic) {
    const std::string np = control_options.elastic() ? std::to_string(topology.min_nnodes) + ":" +
                                                           std::to_string(topology.nnodes)
                                                     : std::to_string(topology.nnodes);
    spdlog::info("start job with np={}, ElasticLevel.{} (Paddle's elastic mode: job '{}' over {})",
                 np, options.fleet_level == kFleetElastic ? "ELASTIC" : "FAULT_TOLERANCE",
                 control_options.job_id, control_plane_where(topology));
  }
  const Heartbeat heartbeat = heartbeat_for(topology.nnodes);
  control_options.heartbeat_interval = heartbeat.interval;
  control_options.heartbeat_timeout = heartbeat.timeout;
  control_options.pace = options.pace;
  if (topology.auto_node_rank) {
    control_options.node_rank = kAutoNodeRank;
    spdlog::info("node ? of {} ({}, no node rank given: {} hands them out); control store at {}",
                 topology.nnodes, topology.source, topology.etcd() ? "etcd" : "node 0",
                 control_plane_where(topology));
  } else {
    spdlog::info("node {} of {} ({}); control store at {}", topology.node_rank, topology.nnodes,
                 topology.source, control_plane_where(topology));
  }
  return control_options;
}

// The endpoints this node publishes to the others: its address (given, node 0's --master_addr
// in torchrun's static spelling, or the route towards the control store, with etcd towards its
// first endpoint) and its ports.
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
    const env::Endpoint& towards =
        topology.etcd() ? topology.etcd()->endpoints.front() : topology.control;
    host = net::route_address_towards(towards.host, towards.port);
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
  const int nodes = config.rank_mapping ? static_cast<int>(config.rank_mapping->nodes.size())
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

// Joins the other nodes through node 0's control store (admitting holders of `secret`, anyone
// when it is empty, or, with `by_munge`, launchers with a munge credential of this Slurm job);
// fills the job id, the endpoints and the first generation this node runs (a later one for a
// node admitted into a running elastic job), and, by munge, the workers' secret (node 0's).
std::unique_ptr<Control> form_multi_node_job(const LaunchOptions& options, const JobConfig& config,
                                             NodeTopology& topology,
                                             const std::optional<std::string>& caller_job_id,
                                             const std::string& secret, bool by_munge,
                                             std::string& job_id, PlanInputs& inputs,
                                             Generation& first, Membership& joined,
                                             std::shared_ptr<ExternalStop> stop) {
  std::shared_ptr<const MungeAdmission> munge =
      by_munge ? munge_admission(topology, inputs.caller_env, caller_job_id) : nullptr;
  std::unique_ptr<Control> control =
      make_control(control_options_for(options, topology, caller_job_id, secret, std::move(munge)));
  topology.node_rank = control->node_rank();

  try {
    const std::vector<env::Endpoint> local = published_endpoints(options, config, topology);
    const Control::Agreement agreement = control->rendezvous(
        describe_job(options, topology), local, job_id, by_munge ? inputs.job_secret : "");
    job_id = agreement.job_id;
    if (by_munge) {
      if (agreement.job_secret.empty()) {
        throw ControlError("node 0 published no workers' secret; is it started with " +
                           std::string(env::kJobSecret) + " while this node is not?");
      }
      inputs.job_secret = agreement.job_secret;
    }
    // Heartbeats from here on: node 0 must not take this node for lost while it waits for the
    // first generation (a node admitted late into an elastic job may wait long).
    control->watch(std::move(stop));
    const Membership membership = control->join_generation(Generation());
    use_membership(membership, inputs);
    first = membership.generation;
    joined = membership;
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

// This node's GPUs as the machine numbers them (nvidia-smi -i): --selected_gpus are positions in
// CUDA_VISIBLE_DEVICES when it is set (an entry that is not a number is left out).
std::vector<int> machine_gpu_ids(const LaunchOptions& options, const env::EnvMap& caller_env) {
  const auto visible = env::lookup(caller_env, "CUDA_VISIBLE_DEVICES");
  if (!visible) return options.selected_gpus;
  const std::vector<std::string> listed = env::split(*visible, ',');
  std::vector<int> ids;
  for (int position : options.selected_gpus) {
    if (position < 0 || position >= static_cast<int>(listed.size())) continue;
    try {
      ids.push_back(std::stoi(listed[static_cast<std::size_t>(position)]));
    } catch (const std::exception&) {  // a GPU UUID: nvidia-smi -i would take it, an int not
    }
  }
  return ids;
}

// Says which flags the job does not use, and which flag defaults came from the environment
// (torchrun's PET_<FLAG>, Paddle's PADDLE_<FLAG>), when any did.
void log_environment_defaults(const LaunchOptions& options) {
  if (!options.unused_flags.empty()) {
    std::string flags;
    for (const auto& f : options.unused_flags) flags += (flags.empty() ? "" : " ") + f;
    spdlog::warn(
        "not used by --run_mode={} (Paddle 2.x's ps controller): {}; {} trainer(s) per "
        "node without devices (count them with --trainer_num)",
        options.run_mode(), flags, options.worker_num);
  }
  for (const std::string& line : options.warnings) spdlog::warn("{}", line);
  if (options.from_environment.empty()) return;
  std::string used;
  for (const auto& v : options.from_environment) used += (used.empty() ? "" : ", ") + v;
  spdlog::info(
      "flag defaults from the environment (torchrun's PET_<FLAG>, Paddle's "
      "PADDLE_<FLAG>): {}",
      used);
}

// How WORKER is run (launcher/supervise/worker_lookup.h).
WorkerCommand resolve_worker(const LaunchOptions& options, const JobContext& context) {
  WorkerCommand command =
      worker_command(WorkerChoice{options.worker, options.module, options.no_python,
                                  options.run_path, options.python},
                     context.launcher_dir, context.caller_env);
  if (command.python) {
    spdlog::debug("running {} as {} -u {}{}", options.worker, command.executable,
                  options.module ? "-m " : "", options.worker);
  }
  return command;
}

// The processes of `plan` as the supervisor starts them: WORKER with its arguments, in the
// caller's environment with the plan's variables on top. In Paddle 2.x's log folder each role's
// logs on this node are numbered from 0, as Paddle 2.x names them (workerlog.0, serverlog.0).
std::vector<Worker> launches_of(const ClusterPlan& plan, const LaunchOptions& options,
                                const WorkerCommand& command, const env::EnvMap& caller_env) {
  std::vector<Worker> launches;
  std::map<env::Role, int> local_index;
  const std::string host = env::this_host_name();
  std::vector<std::vector<int>> cpus =
      options.bind == CpuBind::kNone
          ? std::vector<std::vector<int>>(plan.local.size())
          : assign_cpus(options.bind, read_cpu_topology(), static_cast<int>(plan.local.size()));
  if (options.numa_binding) {
    // Each trainer near its GPU; servers are not pinned.
    std::vector<std::optional<int>> gpus;
    for (const PlannedWorker& spec : plan.local) {
      gpus.push_back(spec.contract.role == env::Role::kTrainer ? spec.contract.gpu : std::nullopt);
    }
    cpus = numa_pins(*numa_affinity_named(*options.numa_binding), gpus, caller_env);
  }
  for (const PlannedWorker& spec : plan.local) {
    Worker l;
    l.role = spec.contract.role;
    l.index = spec.contract.rank;
    const int local = local_index[l.role]++;
    if (options.paddle2_log_folder()) l.log_file = log_file_name(l.role, local);
    l.echo = shown_on_console(options, spec);
    l.executable = command.executable;
    l.args = command.args;
    l.args.insert(l.args.end(), options.worker_args.begin(), options.worker_args.end());
    l.env = merge_env(caller_env, spec.env, spec.removed);
    if (options.virtual_local_rank && l.role == env::Role::kTrainer) {
      env::virtualize_local_rank(spec.contract, env::lookup(caller_env, "CUDA_VISIBLE_DEVICES"),
                                 l.env);
    }
    if (options.log_line_prefix_template) {
      l.line_prefix = env::substitute_template(
          *options.log_line_prefix_template,
          {{"rank", std::to_string(l.index)},
           {"local_rank", std::to_string(spec.contract.local_rank)},
           {"role_name", options.role},
           {"hostname", host}});
    }
    l.cpus = cpus[launches.size()];
    launches.push_back(std::move(l));
  }
  // Lines of several processes on one console need their names.
  const auto shown =
      std::count_if(launches.begin(), launches.end(), [](const Worker& l) { return *l.echo; });
  for (Worker& l : launches) l.prefix_echo = shown > 1;
  return launches;
}

// Paddle 2.x's log folder (LaunchOptions::paddle2_log_folder): LOG_DIR holds what Paddle 2.x's
// holds, the workers' logs and the launcher's own log as <job_id>.<pod>.log (the pod: six random
// lowercase letters, as Paddle names its pods; the job id as env::safe_file_name makes it, so
// that --job_id=../x or /x cannot put the log outside LOG_DIR); the run report, the stack dumps and
// the workers' error files go to the sibling folder LOG_DIR.launch, so that LOG_DIR's listing is
// Paddle's.
struct Paddle2LogFolder {
  std::string pod_log;   // LOG_DIR/<job_id>.<pod>.log
  std::string side_dir;  // LOG_DIR.launch
};

Paddle2LogFolder paddle2_log_folder(const LaunchOptions& options) {
  std::random_device device;
  std::string pod;
  for (int i = 0; i < 6; ++i) pod += static_cast<char>('a' + device() % 26);
  const std::filesystem::path dir = std::filesystem::absolute(*options.log_dir).lexically_normal();
  // "log/" normalizes to "log/" with an empty file name: take its parent's "log".
  const std::filesystem::path named = dir.has_filename() ? dir : dir.parent_path();
  Paddle2LogFolder folder;
  const std::string job = env::safe_file_name(options.job_id.value_or("default"), "default");
  folder.pod_log = (named / (job + "." + pod + ".log")).string();
  folder.side_dir = named.string() + ".launch";
  return folder;
}

// How the supervisor runs this node's processes, short of a multi-node job's hooks and the run
// report.
SupervisorOptions supervisor_options(const LaunchOptions& options, const NodeTopology& topology,
                                     Generation first_generation) {
  SupervisorOptions sup;
  sup.log_dir = options.log_dir;
  sup.append_logs = !options.log_overwrite;
  sup.stdout_filters = options.duplicate_stdout_filters;
  sup.stderr_filters = options.duplicate_stderr_filters;
  sup.quiet = options.quiet;
  sup.kill_timeout = options.kill_timeout;
  sup.restart_policy = RestartPolicy(options.max_restarts, options.no_progress_restarts);
  sup.hang_timeout = options.hang_timeout;
  sup.pace = options.pace;
  if (topology.multi_node()) sup.node_label = "on node " + std::to_string(topology.node_rank);
  sup.server_grace = options.server_grace;
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
      : options_(options), context_(context), config_(options) {}
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  int run() {
    start_paddle2_log_folder();
    log_environment_defaults(options_);
    command_ = resolve_worker(options_, context_);
    topology_ = resolve_topology(options_, context_.caller_env);  // node rank: maybe assigned below
    prepare_inputs();
    fix_identity();
    if (identity_.mode == IdentityMode::kStatic) {
      plan_static_job();
    } else if (topology_.multi_node()) {
      control_ = form_multi_node_job(options_, config_, topology_, caller_job_id_, identity_.secret,
                                     identity_.mode == IdentityMode::kMunge, job_id_, inputs_,
                                     first_generation_, first_membership_, stop_);
      check_nodes(first_membership_, true);
    }
    inputs_.job_id = job_id_;
    choose_error_file_dir();
    plan_first_generation();
    show_plan();
    if (options_.dialect == Dialect::kPaddle2) {
      gpu_log_ = start_gpu_log(options_.enable_gpu_log, options_.log_dir.value_or(""),
                               options_.job_id.value_or("default"),
                               machine_gpu_ids(options_, context_.caller_env), context_.caller_env);
    }

    const GenerationFactory generations = [this](Generation generation) {
      return launches_for(generation);
    };
    SupervisorOptions sup = supervisor_options(options_, topology_, first_generation_);
    if (paddle2_folder_) sup.report_dir = paddle2_folder_->side_dir;
    add_report(sup);
    spdlog::debug("job {}: world size {}", job_id_, plan_.world_size);
    if (!control_) return supervise(generations, sup).exit_code;
    return supervise_with_nodes(generations, sup);
  }

 private:
  // Paddle 2.x's log folder: this launcher's lines from here on also go to LOG_DIR/<job>.<pod>.log.
  void start_paddle2_log_folder() {
    if (!options_.paddle2_log_folder()) return;
    paddle2_folder_ = paddle2_log_folder(options_);
    try {
      std::filesystem::create_directories(*options_.log_dir);
      pod_log_.emplace(paddle2_folder_->pod_log);
    } catch (const std::exception& e) {
      throw SupervisorError("cannot write the launcher's log " + paddle2_folder_->pod_log + ": " +
                            e.what());
    }
    spdlog::info(
        "Paddle 2.x's log folder: {} holds the workers' logs (workerlog.N, serverlog.N by local "
        "index) and this log, {}; launch's run report (report.html, report.json) and stack dumps "
        "are in {}",
        *options_.log_dir, std::filesystem::path(paddle2_folder_->pod_log).filename().string(),
        paddle2_folder_->side_dir);
  }

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

  // The job's identity must be the same on every node (launcher/job/identity.h): the caller's
  // DDL_JOB_ID / DDL_JOB_SECRET when set; otherwise a single node makes its own, a job joined
  // through the control store takes node 0's job id, and a static job derives it (below). A job
  // without a secret says once what runs unauthenticated and what a secret adds.
  void fix_identity() {
    caller_job_id_ = non_empty(context_.caller_env, env::kJobId);
    IdentityRequest request;
    const bool listed = options_.explicit_endpoints() && listed_hosts(options_) > 1;
    request.nnodes = listed ? listed_hosts(options_) : topology_.nnodes;
    request.paddle_static = topology_.paddle_static();
    request.listed_hosts = listed;
    request.caller_secret = non_empty(context_.caller_env, env::kJobSecret);
    request.require_secret = options_.require_secret || secret_required_by(context_.caller_env);
    request.source = listed ? std::string("--servers/--workers") : topology_.source;
    request.slurm_job = non_empty(context_.caller_env, env::kSlurmJobId);
    request.etcd = topology_.etcd() != nullptr;
    identity_ = choose_identity(request);
    // A restart of this node alone would leave the other nodes' workers behind (a local restart
    // cannot restart them), so a static job of Paddle's node list does not restart.
    if (identity_.mode == IdentityMode::kStatic && !listed && options_.max_restarts > 0) {
      throw PlanError("--max_restarts=" + std::to_string(options_.max_restarts) +
                      ": a static job (" + topology_.source + " without " + env::kJobSecret +
                      ") has no control store, so its nodes cannot restart together; set the "
                      "same " +
                      env::kJobSecret + " on every node for job-wide restarts");
    }
    job_id_ = caller_job_id_.value_or(random_hex(kJobIdBytes));
    inputs_.job_secret = identity_.secret;
    const std::string notice =
        without_secret_notice(identity_.mode, control_plane_where(topology_));
    if (identity_.secret.empty() && identity_.mode == IdentityMode::kStatic) spdlog::info(notice);
    if (identity_.mode == IdentityMode::kOpenControlStore) spdlog::warn(notice);
  }

  // A static job (Paddle's node list, PaddleCloud, or --servers/--workers across hosts): every
  // endpoint computed here (launcher/cluster/static_job.h), the job id the caller's
  // (DDL_JOB_ID, else --job_id) or derived from what every node is given alike.
  void plan_static_job() {
    std::vector<env::Endpoint> all;
    if (options_.explicit_endpoints()) {
      all = options_.servers;
      all.insert(all.end(), options_.workers.begin(), options_.workers.end());
    } else {
      warn_ignored_node_flags();
      all = static_endpoints(config_, topology_);
      inputs_.cluster_endpoints = all;
      inputs_.node_rank = topology_.node_rank;
    }
    if (!caller_job_id_) {
      job_id_ = options_.job_id.value_or(derived_job_id(static_description(options_, all)));
    }
    if (options_.explicit_endpoints()) {
      spdlog::info("--servers/--workers on {} hosts: static job {}", listed_hosts(options_),
                   job_id_);
    } else {
      spdlog::info("node {} of {} ({}): static job {}, endpoints {}", topology_.node_rank,
                   topology_.nnodes, topology_.source, job_id_, env::join_endpoints(all));
    }
  }

  // As Paddle's cloud_utils: PaddleCloud's node list wins over --cluster_node_ips given alongside.
  void warn_ignored_node_flags() const {
    const auto* list = std::get_if<nodes::NodeList>(&options_.nodes);
    if (!topology_.cloud() || list == nullptr || !list->hosts_given) return;
    std::string given;
    for (const auto& ip : options_.cluster_node_ips) given += (given.empty() ? "" : ",") + ip;
    std::string cloud;
    for (const auto& ip : topology_.hosts) cloud += (cloud.empty() ? "" : ",") + ip;
    if (given != cloud) {
      spdlog::warn("PaddleCloud gives the nodes ({}={}): --cluster_node_ips={} is ignored",
                   env::kPaddleTrainers, cloud, given);
    }
  }

  // torchrun's error files (TORCHELASTIC_ERROR_FILE): in LOG_DIR, else in a scratch folder.
  void choose_error_file_dir() {
    if (paddle2_folder_) {
      std::filesystem::create_directories(paddle2_folder_->side_dir);
      inputs_.error_file_dir = paddle2_folder_->side_dir;
    } else if (options_.log_dir) {
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
      check_nodes(membership, false);
    }
    PlanInputs in = inputs_;
    in.generation = generation;
    return make_plan(config_, in);
  }

  // The pre-flight check (--preflight) of the generation just joined: every member measures and
  // reaches the same verdict (launcher/preflight/check.h); preflight::decide says what follows.
  // `first`: before the supervisor runs, so a stop or a departure is told to the others here.
  void check_nodes(const Membership& membership, bool first) {
    if (options_.preflight.mode == PreflightMode::kOff || membership.nodes.size() < 2) return;
    if (options_.preflight.mode == PreflightMode::kAuto &&
        !preflight::spans_machines(membership.hosts)) {
      spdlog::debug("--preflight=auto: the nodes of generation {} share a machine; no check",
                    membership.generation.index());
      return;
    }
    preflight::CheckOptions check;
    check.ratio = options_.preflight.ratio;
    preflight::CheckResult result;
    try {
      result = preflight::run_check(*control_, membership, check);
    } catch (const std::exception& e) {
      if (first) fail_here(std::string("the pre-flight check: ") + e.what());
      throw;
    }
    spdlog::info("{}", preflight::summary_line(result));
    preflight::JobShape shape;
    shape.me = topology_.node_rank;
    shape.elastic = topology_.elastic();
    shape.min_nodes = topology_.elastic() ? topology_.min_nnodes : topology_.nnodes;
    shape.restart_left = membership.generation.index() < options_.max_restarts;
    if (!topology_.etcd()) shape.store_host = 0;
    const preflight::Decision decision =
        preflight::decide(result.verdict, membership.generation.index(), shape);
    record_check(result, decision.action == preflight::Action::kGoOn ? "passed" : decision.line);
    switch (decision.action) {
      case preflight::Action::kGoOn:
        return;
      case preflight::Action::kRestartWithout:
        spdlog::warn("{}", decision.line);
        return;
      case preflight::Action::kStop:
        if (first) fail_here(decision.line);
        throw ControlError(decision.line);
      case preflight::Action::kLeave:
        // Not the job's failure: the others go on once this generation ends without this node.
        excluded_ = true;
        control_->report_generation_failure(
            membership.generation,
            FailureNotice{std::nullopt, kExitError,
                          "node " + std::to_string(topology_.node_rank) +
                              " leaves the job, named by the pre-flight check"});
        if (first) control_->finish();
        throw ControlError(decision.line);
    }
  }

  // Keeps a pre-flight check for the run report (made later than the first check).
  void record_check(const preflight::CheckResult& result, const std::string& outcome) {
    PreflightNumbers numbers;
    numbers.generation = result.generation;
    numbers.seconds = result.seconds;
    numbers.outcome = outcome;
    for (const preflight::NodeScore& s : result.verdict.nodes) {
      PreflightNumbers::Node n{s.node, s.gflops, s.best_sent, s.best_received, ""};
      for (const preflight::Named& named : result.verdict.named) {
        if (named.node == s.node) n.named = named.why;
      }
      numbers.nodes.push_back(std::move(n));
    }
    if (report_) {
      report_->preflight(numbers);
    } else {
      early_checks_.push_back(std::move(numbers));
    }
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
    for (const PreflightNumbers& numbers : early_checks_) report_->preflight(numbers);
    sup.report = report_.get();
  }

  // A multi-node job: the supervisor tells the other nodes of failures and successes through
  // the control connection; the job's exit code is this node's, or the first failure's
  // elsewhere.
  int supervise_with_nodes(const GenerationFactory& generations, SupervisorOptions& sup) {
    JobOutcome outcome;
    try {
      sup.external_stop = stop_;
      sup.on_failure = [this](const FailureNotice& notice) {
        // A node the pre-flight check sent away leaves; the job goes on without it.
        if (!excluded_) control_->report_failure(notice);
      };
      sup.on_generation_failure = [this](Generation g, const FailureNotice& notice) {
        control_->report_generation_failure(g, notice);
      };
      sup.on_generation_success = [this](Generation g) { control_->report_generation_success(g); };
      sup.on_node_pace = [this](Generation g, std::int64_t step, double own) {
        control_->report_pace(g, step, own);
      };
      sup.node_verdicts = [this] { return control_->take_node_verdicts(); };
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

  // Paddle 2.x's log folder, when it is one; the copy of this launcher's log lines into it goes
  // last (other threads, e.g. the control connection's, may log until the members below go).
  std::optional<Paddle2LogFolder> paddle2_folder_;
  std::optional<logging::FileCopy> pod_log_;
  const LaunchOptions& options_;
  const JobContext& context_;
  const JobConfig& config_;  // what the planner reads of options_ (its JobConfig part)
  WorkerCommand command_;
  NodeTopology topology_;
  PlanInputs inputs_;
  std::vector<std::uint16_t> first_ports_;  // the ports of the first generation, once picked
  std::optional<std::string> caller_job_id_;
  Identity identity_;
  std::string job_id_;
  std::unique_ptr<Control> control_;  // a multi-node job's
  Generation first_generation_;
  Membership first_membership_;
  std::unique_ptr<GpuLog> gpu_log_;  // Paddle 2.x's LOG_DIR/<job_id>.gpu.log, while the job runs
  std::vector<PreflightNumbers> early_checks_;  // checks made before the run report was
  bool excluded_ = false;  // the pre-flight check named this node in an elastic job: it leaves
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
  const bool launchers =
      typed && (typed->exit_code() == kExitError || typed->exit_code() == kExitUsage ||
                typed->exit_code() == kExitNotFound);
  if (!launchers) return {kExitError, "unexpected error: " + what};
  return ddl::exit_for(error);
}

}  // namespace ddl::launcher
