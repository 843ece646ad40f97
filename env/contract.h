// The environment contract between `launch` and the workers it starts.
//
// This header is the one home of every environment variable the project reads or writes: the
// launcher builds a `WorkerContract` per rank and turns it into variables with `to_env`; a worker
// reads its own back with `from_env`. Nothing else in the project calls getenv/setenv for these
// names (the environment is read in one place only).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "env/error.h"

namespace ddl::env {

// --- Variable names -----------------------------------------------------------------------------
// Paddle's contract (what `python -m paddle.distributed.launch` sets).
inline constexpr const char* kTrainerId = "PADDLE_TRAINER_ID";               // global rank
inline constexpr const char* kTrainersNum = "PADDLE_TRAINERS_NUM";           // world size
inline constexpr const char* kCurrentEndpoint = "PADDLE_CURRENT_ENDPOINT";   // ip:port of this rank
inline constexpr const char* kTrainerEndpoints = "PADDLE_TRAINER_ENDPOINTS"; // all, rank order
inline constexpr const char* kSelectedGpus = "FLAGS_selected_gpus";          // this rank's GPU id
// Paddle's parameter-server mode: each process's role and the servers' endpoints. Written only for
// a job that has servers (Paddle's collective launch sets neither; its ps launch sets both).
inline constexpr const char* kTrainingRole = "TRAINING_ROLE";  // TRAINER|PSERVER|HETER_TRAINER
// Paddle 2.x's ps controller names the role again under this name (same values).
inline constexpr const char* kPaddleRole = "PADDLE_ROLE";
inline constexpr const char* kPserverEndpoints = "PADDLE_PSERVERS_IP_PORT_LIST";  // all servers
// A process's own address, split as Paddle's parameter-server launchers give it: written for
// every process of a parameter-server job (fleet and 2.x give trainers their own too), always
// equal to the two halves of its PADDLE_CURRENT_ENDPOINT. Only a server reads them back.
inline constexpr const char* kServerPort = "PADDLE_PORT";  // this process's port
inline constexpr const char* kPodIp = "POD_IP";            // this process's host
// A heterogeneous parameter-server job (the fleet launcher's --heter_worker_num/--heter_workers):
// a third role, HETER_TRAINER, in stages 2..STAGE_NUM after the CPU trainers (stage 1).
inline constexpr const char* kAllHeterEndpoints = "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST";
inline constexpr const char* kPreviousHeterEndpoints = "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST";
inline constexpr const char* kNextHeterEndpoints = "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST";
inline constexpr const char* kHeterDeviceType = "HETER_DEVICE_TYPE";  // this stage's device
inline constexpr const char* kStageId = "STAGE_ID";                   // 1: the trainers
inline constexpr const char* kStageNum = "STAGE_NUM";                 // 1 + heter stages
// Every stage's process count as a Python list, "[2, 1]" (the trainers' first).
inline constexpr const char* kStageTrainersNum = "PADDLE_STAGE_TRAINERS_NUM";
// torchrun's contract, so PyTorch-style programs run unchanged.
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
// The rest of what torchrun's agent gives each worker (torch/distributed/elastic/agent/server/
// local_elastic_agent.py and elastic/multiprocessing/): libraries such as Lightning, Accelerate
// and torch.distributed.is_torchelastic_launched() read these to tell a torchrun job.
inline constexpr const char* kGroupRank = "GROUP_RANK";              // this node's index
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";   // nodes in the job
inline constexpr const char* kRoleRank = "ROLE_RANK";                // rank among the role
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";     // workers of the role
inline constexpr const char* kRoleName = "ROLE_NAME";                // torchrun --role
inline constexpr const char* kElasticRunId = "TORCHELASTIC_RUN_ID";  // torchrun --rdzv_id
inline constexpr const char* kElasticRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kElasticMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
// "True" when the launcher hosts the c10d store on MASTER_PORT (workers then connect as
// clients); we do not, so "False": init_process_group("env://") makes rank 0 host it there.
inline constexpr const char* kElasticUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
// Where torch.distributed.elastic's @record writes a failed worker's exception (JSON); the
// launcher quotes it in its summary.
inline constexpr const char* kElasticErrorFile = "TORCHELASTIC_ERROR_FILE";
// torchrun gives NCCL's watchdog this default (the caller's value wins).
inline constexpr const char* kNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
// Paddle 2.x's launcher (python/paddle/distributed/launch/controllers/collective.py and the
// fleet launch_utils.py) adds these to Paddle 1.8's collective variables.
inline constexpr const char* kPaddleGlobalRank = "PADDLE_GLOBAL_RANK";
inline constexpr const char* kPaddleLocalRank = "PADDLE_LOCAL_RANK";
inline constexpr const char* kPaddleGlobalSize = "PADDLE_GLOBAL_SIZE";
inline constexpr const char* kPaddleLocalSize = "PADDLE_LOCAL_SIZE";
inline constexpr const char* kPaddleNnodes = "PADDLE_NNODES";
inline constexpr const char* kPaddleMaster = "PADDLE_MASTER";            // rank 0's endpoint
inline constexpr const char* kPaddleRankInNode = "PADDLE_RANK_IN_NODE";  // = local rank
inline constexpr const char* kPaddleWorldDeviceIds = "PADDLE_WORLD_DEVICE_IDS";
inline constexpr const char* kPaddleLocalDeviceIds = "PADDLE_LOCAL_DEVICE_IDS";
inline constexpr const char* kPaddleJobId = "PADDLE_JOB_ID";             // --job_id
// "gloo" when the job uses no GPU: Paddle's init_parallel_env otherwise takes the NCCL way.
inline constexpr const char* kPaddleDistriBackend = "PADDLE_DISTRI_BACKEND";
// A parameter-server job's Gloo rendezvous for Paddle's role maker (Paddle's launchers set them).
inline constexpr const char* kPaddleWithGloo = "PADDLE_WITH_GLOO";
inline constexpr const char* kPaddleGlooRendezvous = "PADDLE_GLOO_RENDEZVOUS";
inline constexpr const char* kPaddleGlooFsPath = "PADDLE_GLOO_FS_PATH";
inline constexpr const char* kPaddleGlooHttpEndpoint = "PADDLE_GLOO_HTTP_ENDPOINT";
// Threading of the math libraries inside each worker.
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
// Python's output buffering: "1" for every worker unless the caller set it (Python scripts run
// with -u as under torchrun; this covers the Python programs a worker starts).
inline constexpr const char* kPythonUnbuffered = "PYTHONUNBUFFERED";
// Removed from the workers' environment as both Paddle launchers do (a proxy breaks local
// rendezvous over HTTP), each kept under our name.
inline constexpr std::pair<const char*, const char*> kRemovedProxies[] = {
    {"http_proxy", "DDL_SAVED_HTTP_PROXY"}, {"https_proxy", "DDL_SAVED_HTTPS_PROXY"}};
// Our own additions.
inline constexpr const char* kJobId = "DDL_JOB_ID";            // names one job (one launch)
inline constexpr const char* kJobSecret = "DDL_JOB_SECRET";    // store admits only holders
// "1" (or true/yes): `launch` refuses a multi-node job without DDL_JOB_SECRET (a site's policy;
// the same as --require_secret). Unset: such a job runs unauthenticated, as torchrun's does.
inline constexpr const char* kRequireSecret = "DDL_REQUIRE_SECRET";
// munged's socket for the launchers' credentials under Slurm (launcher/coord/munge_auth.h);
// unset: the socket slurm.conf names, else munge's default.
inline constexpr const char* kMungeSocket = "DDL_MUNGE_SOCKET";
inline constexpr const char* kRendezvousTimeoutMs = "DDL_RENDEZVOUS_TIMEOUT_MS";
inline constexpr const char* kRestartCount = "DDL_RESTART_COUNT";  // 0 on the first start
inline constexpr const char* kLogLevel = "DDL_LOG_LEVEL";      // debug|info|warn|error
inline constexpr const char* kFault = "DDL_FAULT";             // fault injection (testing aid)
// The file descriptor of the pipe a worker writes its progress to (one line per step; the
// protocol is launcher/health/progress.h, the C++ call worker/runtime/progress.h). Set by
// `launch` for every process it starts.
inline constexpr const char* kProgressFd = "DDL_PROGRESS_FD";

// A worker that gives up at a rendezvous or collective deadline exits kExitDeadline
// (env/exit_codes.h). The launcher then takes the stack traces of the processes still running
// before it stops them: the stuck peer is among them (launcher/diagnose/).

// Default rendezvous deadline when the contract does not set one.
inline constexpr std::chrono::milliseconds kDefaultRendezvousTimeout{300'000};

// A problem with the environment: names the variable and quotes its value. A worker ends with
// kExitParallel for it ("environment: ..."); `launch` reads it as its own error (launcher/job).
class EnvError : public Error {
 public:
  explicit EnvError(const std::string& what) : Error(kExitParallel, "environment", what) {}
};

// A snapshot of (part of) a process environment, name -> value.
using EnvMap = std::map<std::string, std::string>;

// The calling process's whole environment. The only place in the project that reads `environ`.
EnvMap current_environment();

// The value of `name` in `env`, if set (an empty value counts as set).
std::optional<std::string> lookup(const EnvMap& env, const std::string& name);

// --- Typed pieces -------------------------------------------------------------------------------
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;

  std::string str() const;  // "host:port"
  bool operator==(const Endpoint& o) const { return host == o.host && port == o.port; }
  bool operator!=(const Endpoint& o) const { return !(*this == o); }
};

// Parses "host:port" (port 1..65535, host not empty, no spaces). `what` names the source of the
// text (a variable or flag) for the error message. Throws EnvError.
Endpoint parse_endpoint(std::string_view text, std::string_view what);

// Parses "a,b,c" endpoints; the list must not be empty. Throws EnvError.
std::vector<Endpoint> parse_endpoint_list(std::string_view text, std::string_view what);
std::string join_endpoints(const std::vector<Endpoint>& endpoints);

// Parses a non-negative decimal integer that fits in int (no sign, no spaces). Throws EnvError
// quoting `what` and the text.
int parse_non_negative_int(std::string_view text, std::string_view what);

// What a launched process is in its job: a trainer (every process of a collective job), a
// parameter server, or a heter worker (a heterogeneous parameter-server job's later stages).
enum class Role { kTrainer, kServer, kHeterTrainer };

// TRAINING_ROLE's value for `role`: "TRAINER", "PSERVER" or "HETER_TRAINER".
std::string role_value(Role role);
// Parses TRAINING_ROLE's value (exactly one of role_value's). Throws EnvError quoting `what` and
// the text.
Role parse_role(std::string_view text, std::string_view what);
// The role named in messages: "trainer", "server" or "heter worker".
std::string role_noun(Role role);

// One stage of heter workers (stage 2, 3, ...): its device type as the user named it ("gpu",
// "xpu", "cpu") and its workers' endpoints.
struct HeterStage {
  std::string device;
  std::vector<Endpoint> endpoints;
  bool operator==(const HeterStage& o) const {
    return device == o.device && endpoints == o.endpoints;
  }
};

// --- The contract -------------------------------------------------------------------------------
// Everything one worker is told about its place in the job.
//
// Trainers and servers share the struct. For a trainer everything is as in a collective job and
// `server_endpoints` lists the job's servers (empty in a collective job). For a server `rank` is
// its index among the servers and `current` is server_endpoints[rank]; world_size and endpoints
// still describe the trainers, local_rank/local_world_size count this node's servers, and
// torchrun's variables (which know no servers) are not written. A heter worker is like a server
// with heter_endpoints in place of server_endpoints (its rank is its index among all heter
// workers, stage order).
struct WorkerContract {
  // Who wrote the contract: `launch` (the whole contract below), or a scheduler that started the
  // worker itself (env/scheduler.h: Slurm's srun, Open MPI's mpirun). A scheduler's contract
  // knows only the store's endpoint: `endpoints` is then {MASTER_ADDR:MASTER_PORT} alone and
  // `current` is this process's host (empty: this machine's host name) with port 0.
  enum class Source { kLaunch, kSlurm, kMpi };
  Source source = Source::kLaunch;
  Role role = Role::kTrainer;
  int rank = 0;              // global rank, node-major (a server: its index among the servers)
  int world_size = 1;
  int local_rank = 0;        // index among the workers of this node
  int local_world_size = 1;
  Endpoint current;                 // this rank's endpoint
  std::vector<Endpoint> endpoints;  // every rank's endpoint in rank order; [0] hosts the store
  std::optional<int> gpu;           // FLAGS_selected_gpus, when GPUs were selected
  std::string job_id;               // may be empty for hand-started workers
  std::string secret;               // may be empty: the store then admits anyone with the job id
  std::chrono::milliseconds rendezvous_timeout = kDefaultRendezvousTimeout;
  int restart_count = 0;
  // PADDLE_PSERVERS_IP_PORT_LIST: every server's endpoint; empty in a collective job. Required
  // (non-empty) for a server and a heter worker.
  std::vector<Endpoint> server_endpoints;
  // PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST: every heter worker, stage order; empty unless the job
  // has heter workers. Required for a heter worker (its index is its position here).
  std::vector<Endpoint> heter_endpoints;
  // The heter stages 2.. in order (their endpoints joined are heter_endpoints) and this process's
  // stage (1 for a trainer). Written as the stage variables (STAGE_ID, STAGE_NUM, HETER_DEVICE_TYPE,
  // PADDLE_PREVIOUS/NEXT_HETER_TRAINER_IP_PORT_LIST, PADDLE_STAGE_TRAINERS_NUM) for trainers and
  // heter workers; not read back (from_env leaves them empty).
  std::vector<HeterStage> heter_stages;
  int stage = 1;

  // The job around a trainer, as torchrun and Paddle 2.x describe it. Written for programs that
  // read them; our runtime does not read them back.
  int node_rank = 0;  // GROUP_RANK: this node's index among the nodes of the job
  int nnodes = 1;     // GROUP_WORLD_SIZE, PADDLE_NNODES
  std::string role_name = "default";       // ROLE_NAME (torchrun's --role)
  std::string run_id = "none";             // TORCHELASTIC_RUN_ID, the same in every generation
  int max_restarts = 0;                    // TORCHELASTIC_MAX_RESTARTS
  std::string paddle_job_id = "default";   // PADDLE_JOB_ID (Paddle's --job_id default)
  // Every trainer's device, rank order: its GPU id, or its local rank on a CPU-only job (as
  // Paddle numbers CPU processes). PADDLE_WORLD_DEVICE_IDS; entry [rank] is
  // PADDLE_LOCAL_DEVICE_IDS. Empty: every trainer's local rank, nodes of local_world_size each.
  std::vector<int> world_device_ids;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE; empty: not written

  // Throws EnvError when the fields are inconsistent (rank >= world, endpoint count != world,
  // current != endpoints[rank] (a server: != server_endpoints[rank]), local_rank >=
  // local_world_size, a server without server endpoints, ...).
  void validate() const;
};

// "launch", "Slurm (srun)" or "Open MPI (mpirun)": for messages.
std::string source_name(WorkerContract::Source source);

// The variables that carry `c`: Paddle's (1.8 and 2.x), torchrun's and ours. Validates first;
// only a contract from `launch` can be written (EnvError otherwise). TRAINING_ROLE, PADDLE_ROLE,
// PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_PORT and POD_IP (the process's own port and host) are
// written only when the job has servers (`server_endpoints` not empty), so a collective job's
// environment is exactly Paddle's collective one. A server or heter worker gets no
// PADDLE_TRAINER_ID and no torchrun variables, but PADDLE_NNODES. A job with heter workers adds
// PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST for every process and, with `heter_stages`, the stage
// variables for trainers and heter workers.
EnvMap to_env(const WorkerContract& c);

// torchrun's virtual local rank, on a trainer's variables `env` (from to_env(c)): LOCAL_RANK=0
// and CUDA_VISIBLE_DEVICES narrowed to the one device the trainer uses, the entry of
// `parent_visible` (the launcher's CUDA_VISIBLE_DEVICES, a comma list) at its GPU index (its
// local rank for a trainer without one), or that index itself without a list; the device
// variables then name device 0 (FLAGS_selected_gpus when set, PADDLE_LOCAL_DEVICE_IDS, every
// entry of PADDLE_WORLD_DEVICE_IDS). Throws EnvError when the list has no such entry.
void virtualize_local_rank(const WorkerContract& c, const std::optional<std::string>& parent_visible,
                           EnvMap& env);

// Reads a contract back from `env`.
// - No contract variable at all: std::nullopt (the program runs as a world of one).
// - A partial or inconsistent contract: throws EnvError naming the variable and its value.
// Paddle's variables are the contract; torchrun's are written for other programs, not read.
// TRAINING_ROLE unset means a trainer. A server's index is its PADDLE_CURRENT_ENDPOINT's position
// in PADDLE_PSERVERS_IP_PORT_LIST (as Paddle's role maker finds it), a heter worker's its position
// in PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST. A server's PADDLE_PORT and
// POD_IP are optional; when set, each must agree with PADDLE_CURRENT_ENDPOINT (else EnvError
// quoting both). A trainer ignores them (Kubernetes, for one, sets POD_IP for every process).
std::optional<WorkerContract> from_env(const EnvMap& env);

// The typed pieces on their own, for programs that read or set one of them:
// TRAINING_ROLE (unset: trainer; anything but TRAINER/PSERVER: EnvError quoting it) ...
Role role_of(const EnvMap& env);
void set_role(EnvMap& env, Role role);
// ... and PADDLE_PSERVERS_IP_PORT_LIST (unset: empty; set, it must be a non-empty endpoint list,
// else EnvError). set_server_endpoints with an empty list removes the variable.
std::vector<Endpoint> server_endpoints_of(const EnvMap& env);
void set_server_endpoints(EnvMap& env, const std::vector<Endpoint>& servers);

// Log level requested through the environment (DDL_LOG_LEVEL), if any. Not validated here.
std::optional<std::string> log_level(const EnvMap& env);

// --- Fault injection (a testing aid) -------------------------------------------------------------
// DDL_FAULT="rank=R,step=S,ACTION[,restart=G]" makes rank R, on reaching training step S, do ACTION:
//   exit=C   exit at once with code C (no cleanup, like a crash that still reports a code)
//   abort    raise SIGABRT
//   hang     stop making progress (sleep forever; the hang guard or a peer's timeout ends it)
// With restart=G the fault fires only in the G-th start of the job (DDL_RESTART_COUNT == G),
// so a job run with --max_restarts can be made to fail exactly once.
struct FaultSpec {
  enum class Action { kExit, kAbort, kHang };
  int rank = 0;
  std::int64_t step = 0;
  Action action = Action::kExit;
  int exit_code = 1;
  std::optional<int> restart;

  // True when this spec fires for `rank` at `step` in start number `restart_count`.
  bool fires(int rank_now, std::int64_t step_now, int restart_count) const;
};

// Parses DDL_FAULT if set. Throws EnvError quoting the value when it is malformed.
std::optional<FaultSpec> fault_spec(const EnvMap& env);
FaultSpec parse_fault_spec(std::string_view text);

// The OMP_NUM_THREADS a launcher should give each of `local_workers` workers on a machine with
// `cores` cores: max(1, cores / local_workers).
int default_omp_threads(int cores, int local_workers);

}  // namespace ddl::env
