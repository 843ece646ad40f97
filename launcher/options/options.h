// `launch [options] WORKER [WORKER ARGS...]`: the command line, parsed into a plain struct.
//
// Every flag is declared once, in the flag table (flags.h): its spellings, value check, default,
// environment variables, help and --print_config line. parse_options() reads argv against that
// table (command_line.h) and fills LaunchOptions; everything downstream reads LaunchOptions (the
// planner a JobConfig made from it). Launcher options end at the first argument that is not an
// option (or at "--"): that argument is WORKER and everything after it is passed to the worker
// untouched, even when it looks like one of our flags.
#pragma once

#include <spdlog/common.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/cluster/job_config.h"
#include "launcher/health/pace_options.h"
#include "launcher/health/preflight_options.h"
#include "launcher/options/nodes.h"
#include "launcher/options/rank_mapping.h"

namespace ddl::launcher {

// A bad command line: the message names the flag and quotes the bad value. `launch` prints it as
// one line and exits with code 2.
class OptionsError : public Error {
 public:
  explicit OptionsError(const std::string& what) : Error(kExitUsage, "bad command line", what) {}
};

inline constexpr const char* kDefaultNodeIp = "127.0.0.1";
inline constexpr std::chrono::milliseconds kDefaultKillTimeout{10'000};
// Paddle 2.x's --max_restart default, which --elastic_level=1 without --max_restart uses.
inline constexpr int kPaddleDefaultMaxRestart = 3;
// Paddle's fleet elastic levels (its ElasticLevel), LaunchOptions::fleet_level.
inline constexpr int kFleetFaultTolerance = 1;
inline constexpr int kFleetElastic = 2;
inline constexpr int kDefaultControlPort =
    29500;  // multi-node, without --master_port/--started_port
inline constexpr int kDefaultRendezvousPort =
    29400;  // --rdzv_endpoint=HOST without a port (torchrun's)
// An etcd endpoint without a port: etcd's client port.
inline constexpr int kDefaultEtcdPort = 2379;
inline constexpr int kMaxNodes = 65'536;           // --nnodes accepts 1..kMaxNodes
inline constexpr int kMaxRestartsLimit = 1000;     // --max_restarts accepts 0..kMaxRestartsLimit
inline constexpr int kMaxProcessesPerRole = 4096;  // --server_num / --worker_num accept 1..this

// A set of local ranks, as torchrun's --tee/--redirects ("3": every rank; "0:3,1:0": per local
// rank, 0 meaning none) and --local_ranks_filter ("0,2") spell it.
struct LocalRanks {
  bool all = false;
  std::vector<int> ranks;  // when not all, sorted
  bool contains(int local_rank) const {
    return all || std::find(ranks.begin(), ranks.end(), local_rank) != ranks.end();
  }
  bool empty() const { return !all && ranks.empty(); }
};

// Whose flags the command line uses: the launcher `launch` stands in for, where the launchers
// differ in what they do (parse_options decides; docs/flags.md, "Whose flags"). Decided from the
// spellings typed (the flag table's origins, flags.h): a spelling that only one launcher has
// decides; several such of different launchers: the first of Paddle 2.x, fleetrun, Paddle 1.8,
// torchrun (each newer Paddle launcher accepts the older ones' spellings); none: the one
// launcher every spelling typed belongs to, else kOurs. --log_level, --print_config and
// --log_overwrite do not count. A command line that decides nothing is decided the same way by
// the variables that stood for flags (PET_: torchrun, PADDLE_: Paddle 2.x).
enum class Dialect {
  kOurs,      // launch's own, or spellings several launchers share: launch's defaults
  kTorchrun,  // torchrun (torch.distributed.run)
  kPaddle18,  // Paddle 1.8's paddle.distributed.launch
  kFleetrun,  // the fleet launcher (fleetrun; paddle.distributed.launch of Paddle 2.0 to 2.2)
  kPaddle2,   // Paddle 2.x's launcher (paddle.distributed.launch, launch/main.py)
};
// "launch", "torchrun", "paddle1.8", "fleetrun", "paddle2" (as --print_config shows it).
const char* dialect_name(Dialect dialect);
// --bind: how this node's processes are pinned to CPUs (launcher/supervise/cpu_binding.h).
enum class CpuBind {
  kNone,  // not pinned: every process may run on every CPU launch may use
  kCore,  // each process its own contiguous, equal share of those CPUs
  kNuma,  // each process the CPUs of one NUMA node, processes spread over the nodes
};
// "none", "core", "numa": --bind's values.
const char* cpu_bind_name(CpuBind bind);

// How the launchers reach an etcd cluster that secures itself (--rdzv_conf, torchrun's keys):
// TLS (protocol=https; cacert|ca_cert, cert|ssl_cert, key|ssl_cert_key) and etcd's user
// authentication (username|user, password).
struct EtcdSecurity {
  bool tls = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string user;
  std::string password;

  bool any() const { return tls || !user.empty(); }
};

// The parsed command line. What the planner reads (the node list, the counts, the ports, the
// names the workers are told) is its JobConfig part (launcher/cluster/job_config.h), written here
// once under each flag's name: --selected_gpus / --gpus / --devices (resolved against
// CUDA_VISIBLE_DEVICES), nproc_per_node (#gpus when selected, else --nproc_per_node or 1),
// --cluster_node_ips / --ips (with torchrun's spelling only this node's address; the others are
// learnt at start), --node_ip (with --nnodes the address this node's workers are reached at,
// default: found by routing towards --master_addr), --started_port, --master_port, the
// parameter-server counts and lists, --rdzv_id, --role, --job_id, --log_level,
// --rendezvous_timeout, --max_restarts, --backend, --rank_mapping_file.
struct LaunchOptions : JobConfig {
  Dialect dialect = Dialect::kOurs;    // whose flags these are (see Dialect)
  std::optional<std::string> log_dir;  // --log_dir; unset: every rank prints to the console
  bool quiet = false;                  // --quiet: with --log_dir, rank 0 is not echoed either
  bool node_ip_given = false;          // --node_ip (or --local_addr) was on the command line
  // How the command line describes the nodes, decided once among its spellings (nodes.h): one
  // node, a node list, a rank mapping, a control store on node 0, or an etcd cluster.
  NodeDescription nodes = nodes::OneNode{};
  // torchrun's spelling (launcher/cluster/topology.h maps it onto the node list): --nnodes,
  // --node_rank,
  // --master_addr (node 0's address; it hosts the control store there). Exclusive with
  // --cluster_node_ips.
  std::optional<int> nnodes;               // --nnodes=N, or MAX of --nnodes=MIN:MAX
  std::optional<int> min_nnodes;           // MIN of --nnodes=MIN:MAX (elastic when below nnodes)
  std::optional<int> node_rank;            // --node_rank, or --rank (Paddle 2.x)
  std::optional<std::string> master_addr;  // --master_addr, or HOST of --master (Paddle 2.x)
  // master_port (JobConfig's): also the control store's port in a multi-node job (either
  // spelling); default: --started_port - 1 when that is set, else kDefaultControlPort. Except in
  // torchrun's static spelling (workers_master() below), where it is the workers' MASTER_PORT.
  // --use_paddlecloud (Paddle 1.8): the nodes come from PaddleCloud's variables
  // (env/scheduler.h, launcher/cluster/topology.h), which must then be set (unless
  // PADDLE_TRAINERS_NUM is 1).
  bool use_paddlecloud = false;
  // --require_secret: a multi-node job without DDL_JOB_SECRET is refused (launcher/job/identity.h).
  bool require_secret = false;
  bool print_config = true;  // --print_config[=false]
  // The PET_<FLAG> variables that gave a flag its value, as "PET_NNODES=2" (see parse_options).
  std::vector<std::string> from_environment;
  // --log_level (log_level_name, JobConfig's, is its normalized name when given).
  spdlog::level::level_enum log_level = spdlog::level::info;
  std::chrono::milliseconds kill_timeout = kDefaultKillTimeout;  // --kill_timeout (seconds)
  std::chrono::milliseconds hang_timeout{0};  // --hang_timeout (seconds); 0: no hang guard
  // --straggler, --straggler_ratio, --step_timeout_factor, --step_timeout_floor.
  PaceOptions pace;
  // --preflight, --preflight_ratio: the pre-flight check of a multi-node job's generations.
  PreflightOptions preflight;
  // --no_progress_restarts: stop (exit 93) after this many failed generations in a row without
  // progress; 0: never.
  int no_progress_restarts = 0;
  // A parameter-server job (Paddle's launch_ps flags, JobConfig's server_num, worker_num,
  // servers, workers): nproc_per_node is then worker_num (or, with explicit lists, the number of
  // --workers entries on this node) and cluster_node_ips is {node_ip} with explicit lists.
  // --server_grace (seconds): once every trainer of this node has exited 0, how long servers
  // (and heter workers) still running may take to exit by themselves before they are stopped.
  // Unset: none, they are stopped at once, as Paddle's launchers do.
  std::optional<std::chrono::milliseconds> server_grace;
  // Flags given that the job does not use, each with why, for one warning line (Paddle 2.x's
  // --run_mode=ps ignores --nproc_per_node and --devices).
  std::vector<std::string> unused_flags;
  // Other things the command line asked for that the job does differently, one line each,
  // logged as warnings when the job starts.
  std::vector<std::string> warnings;
  // Elastic jobs: after MIN nodes joined, how long to wait for more before starting
  // (--rdzv_conf last_call_timeout=S, torchrun's spelling and default).
  std::chrono::milliseconds last_call_timeout{30'000};
  bool last_call_timeout_given = false;  // by --rdzv_conf (--elastic_timeout may not say it too)
  EtcdSecurity etcd_security;  // --rdzv_conf's TLS and authentication keys (etcd only)
  // How WORKER is run (launcher/supervise/worker_lookup.h): a script ending in .py, or a module
  // (-m/--module), by the Python interpreter with -u, as torchrun and Paddle do; --no_python runs
  // WORKER itself whatever its name. --python names the interpreter (default: python3 on PATH).
  bool module = false;                // -m / --module
  bool no_python = false;             // --no_python / --no-python
  bool run_path = false;              // --run_path: WORKER is a Python script whatever its name
  std::optional<std::string> python;  // --python=PROGRAM
  // The launcher's console (see LocalRanks): which local ranks' lines it shows. Unset: local
  // rank 0 of this node with --log_dir, every rank without.
  std::optional<LocalRanks> local_ranks_filter;  // --local_ranks_filter (torchrun)
  LocalRanks tee;                                // --tee / -t: also shown, with --log_dir
  LocalRanks redirects;                          // --redirects / -r: checked, see README
  // --log_line_prefix_template (torchrun): what goes before each console line of a worker, with
  // ${rank}, ${local_rank}, ${role_name}, ${hostname} (launcher/job/job.cpp); unset: "[rank N] ".
  std::optional<std::string> log_line_prefix_template;
  std::optional<double> monitor_interval;        // --monitor_interval (seconds; torchrun's)
  // --duplicate_stdout_filters / --duplicate_stderr_filters (torchrun): with --log_dir, the
  // console's lines containing any of these also go to LOG_DIR/filtered_stdout.log, resp.
  // filtered_stderr.log (launcher/supervise/output.h, FilteredCopy).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string start_method = "spawn";            // --start_method (torchrun): spawn|fork|forkserver
  // --log_overwrite[=false]: append to the logs if false; unset, false with Paddle's flags
  // (every Paddle launcher opens its logs for appending), true otherwise.
  bool log_overwrite = true;
  // --enable_gpu_log (Paddle 2.x): with GPUs and a log folder, LOG_DIR/<job_id>.gpu.log from
  // nvidia-smi (launcher/diagnose/gpu_log.h).
  bool enable_gpu_log = true;
  // --sort_ip (Paddle 2.x): a control-plane job's ranks follow its nodes' addresses.
  bool sort_ip = false;
  // Paddle's fleet elastic mode (fleet_elastic.h; paddle_elastic, JobConfig's, is then true):
  // its level, kFleetFaultTolerance (a fixed --np N) or kFleetElastic (--np MIN:MAX); 0 when off.
  int fleet_level = 0;
  // --elastic_level (Paddle 2.x) as given: <= 0 a failure ends the job (max_restarts 0), >= 1
  // restarts (max_restarts defaults to Paddle's 3).
  std::optional<int> elastic_level;
  // --selected_gpus as typed, before it is made relative to CUDA_VISIBLE_DEVICES (Paddle 1.8).
  std::vector<int> selected_gpus_given;
  // --backend (the fleet launcher's) as given: "auto", "gloo" or "nccl"; unset: not given.
  // Trainers then get PADDLE_DISTRI_BACKEND = distri_backend = resolved_backend().
  std::optional<std::string> backend;
  CpuBind bind = CpuBind::kNone;  // --bind
  // --numa-binding (torchrun's): node, socket, exclusive or core-complex
  // (launcher/supervise/numa_binding.h); unset: not pinned near the GPUs.
  std::optional<std::string> numa_binding;
  // --virtual_local_rank (torchrun): each trainer sees its own GPU alone, as device 0, with
  // LOCAL_RANK=0 (env::virtualize_local_rank).
  bool virtual_local_rank = false;
  // --rank_mapping_file (as given) and --enable_auto_mapping, the fleet launcher's rank
  // placement. With both, `rank_mapping` is the file's (read and checked by parse_options):
  // cluster_node_ips are then its hosts, node_ip one of them (the only one by default) and
  // nproc_per_node the number of ranks this node runs.
  std::optional<std::string> rank_mapping_file;
  bool enable_auto_mapping = false;
  bool report = true;    // --report[=false]: write LOG_DIR/report.json and report.html
  // A job on several hosts from one terminal (launcher/fanout/fanout.h): --hostfile or --hosts
  // as given, narrowed by --include, --exclude, --num_nodes, --num_gpus; ssh's port; more
  // variables to forward. exit_with_stdin: stop when standard input ends (a node it started).
  std::optional<std::string> hostfile;
  std::optional<std::string> hosts;
  std::optional<std::string> include_hosts;
  std::optional<std::string> exclude_hosts;
  std::optional<int> num_nodes;
  std::optional<int> num_gpus;
  std::optional<int> ssh_port;
  std::vector<std::string> forward_env;
  bool exit_with_stdin = false;
  bool fanout() const { return hostfile || hosts; }
  bool help = false;     // --help / -h: print help_text() and exit 0 (WORKER not required)
  bool version = false;  // --version: print the version and exit 0 (WORKER not required)

  std::string worker;                    // WORKER as typed (resolved later)
  std::vector<std::string> worker_args;  // everything after WORKER, untouched

  // The etcd cluster that is the job's control plane, when the command line names one.
  const nodes::Etcd* etcd() const { return etcd_of(nodes); }
  // No node rank given, and the spelling hands them out: etcd, or node 0 with torchrun's c10d
  // backend or Paddle 2.x's --master (in the order the launchers reach it).
  bool auto_node_rank() const {
    if (node_rank) return false;
    const auto* store = std::get_if<nodes::ControlStore>(&nodes);
    return etcd() != nullptr || (store != nullptr && store->ranks_from_node0);
  }
  // True for --nnodes=MIN:MAX with MIN < MAX: the job runs on any number of nodes in between.
  bool elastic() const { return min_nnodes && nnodes && *min_nnodes < *nnodes; }
  // torchrun's static spelling without --started_port, collective: rank 0's endpoint is
  // --master_addr:--master_port (default port 29500), on one node or many, so the workers see
  // MASTER_ADDR/MASTER_PORT as given; in a multi-node job the control store then moves to the
  // next port (workers_master_port() + 1).
  bool workers_master() const {
    const auto* store = std::get_if<nodes::ControlStore>(&nodes);
    return store != nullptr && store->static_master && !started_port && !ps_job();
  }
  int workers_master_port() const { return master_port.value_or(kDefaultControlPort); }
  // Paddle's --run_mode for this job: "ps-heter" for a parameter-server job with heter workers,
  // "ps" for one without, else "collective".
  std::string run_mode() const {
    return !ps_job() ? "collective" : heter.empty() ? "ps" : "ps-heter";
  }
  // --backend made concrete: "nccl" when the workers have GPUs, else "gloo".
  std::string resolved_backend() const { return selected_gpus.empty() ? "gloo" : "nccl"; }
  // Paddle 2.x's log folder (dialect kPaddle2 with a log dir): the workers' logs under Paddle
  // 2.x's names (workerlog.<local index>, serverlog.<local index>) and the launcher's own log,
  // <job_id>.<pod>.log, in LOG_DIR; the run report beside it (launcher/job/job.cpp).
  bool paddle2_log_folder() const { return dialect == Dialect::kPaddle2 && log_dir.has_value(); }
};

// What --nproc_per_node=auto|cpu|gpu counts: this machine's usable cores and visible GPUs.
struct MachineCounts {
  int cores = 1;
  int gpus = 0;
};

// The GPUs a process started here would see: /dev/nvidia<N> devices, narrowed by
// CUDA_VISIBLE_DEVICES in `env` when it is set (as CUDA does: the list ends at its first entry
// that names no device).
int visible_gpu_count(const env::EnvMap& env);

// Parses argv (argv[0] is the program). Throws OptionsError for unknown options, bad values,
// inconsistent flags and a missing WORKER (unless --help or --version). A bad value that came from
// a variable names it and the flag: "PET_NNODES='x' (for --nnodes): expected ...".
//
// `env` supplies defaults the way torchrun reads them: PET_<FLAG> (PET_NNODES, PET_NPROC_PER_NODE,
// PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_MAX_RESTARTS, PET_RDZV_ID, PET_RDZV_CONF,
// PET_RDZV_ENDPOINT, PET_RDZV_BACKEND, PET_ROLE, PET_LOG_DIR; Kubeflow's training operator sets
// them in every PyTorchJob pod) stands for --<flag> when neither that flag nor another spelling
// of the same thing is on the command line. Each one used is listed in `from_environment`.
// Long flags may be spelled with dashes (--nproc-per-node) as torchrun allows.
LaunchOptions parse_options(int argc, const char* const argv[], const env::EnvMap& env = {},
                            const MachineCounts& machine = {});

// "ddlaunch <version>".
std::string version_text();

// The "Configuration Arguments" block printed by --print_config (ends with a newline).
std::string describe_options(const LaunchOptions& o);

}  // namespace ddl::launcher
