#include "env/contract.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "env/host.h"
#include "env/text.h"

extern char** environ;

namespace ddl::env {
namespace {

std::string quote(std::string_view v) { return "'" + std::string(v) + "'"; }

[[noreturn]] void fail(std::string_view what, std::string_view value, std::string_view expected) {
  std::ostringstream os;
  os << what << "=" << quote(value) << ": " << expected;
  throw EnvError(os.str());
}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    std::size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

std::optional<std::string> lookup(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::string Endpoint::str() const { return host + ":" + std::to_string(port); }

int parse_non_negative_int(std::string_view text, std::string_view what) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0 || text[0] == '+' ||
      text[0] == '-') {
    fail(what, text, "expected a non-negative integer");
  }
  return value;
}

namespace {

// What is wrong with `text` as host:port ("" when nothing is; `out` is then the endpoint).
std::string endpoint_problem(std::string_view text, Endpoint& out) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    return "expected host:port";
  }
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (!is_valid_host(host)) return quote(host) + " is not " + std::string(kHostRule);
  int port = 0;
  const char* end = port_text.data() + port_text.size();
  auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (ec != std::errc() || ptr != end || port < 1 || port > 65535 || port_text[0] == '+') {
    return "expected a port between 1 and 65535 in host:port";
  }
  out = Endpoint{std::string(host), static_cast<std::uint16_t>(port)};
  return "";
}

}  // namespace

Endpoint parse_endpoint(std::string_view text, std::string_view what) {
  Endpoint e;
  if (const std::string problem = endpoint_problem(text, e); !problem.empty()) {
    fail(what, text, problem);
  }
  return e;
}

std::vector<Endpoint> parse_endpoint_list(std::string_view text, std::string_view what) {
  if (text.empty()) fail(what, text, "expected a comma-separated list of host:port");
  std::vector<Endpoint> out;
  for (std::string_view part : split(text, ',')) {
    if (part.empty()) fail(what, text, "empty entry in the endpoint list");
    Endpoint e;
    if (const std::string problem = endpoint_problem(part, e); !problem.empty()) {
      fail(what, text, "entry " + quote(part) + ": " + problem);
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::string join_endpoints(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (i) out += ',';
    out += endpoints[i].str();
  }
  return out;
}

std::string role_value(Role role) {
  switch (role) {
    case Role::kServer:
      return "PSERVER";
    case Role::kHeterTrainer:
      return "HETER_TRAINER";
    case Role::kTrainer:
      break;
  }
  return "TRAINER";
}

std::string role_noun(Role role) {
  switch (role) {
    case Role::kServer:
      return "server";
    case Role::kHeterTrainer:
      return "heter worker";
    case Role::kTrainer:
      break;
  }
  return "trainer";
}

Role parse_role(std::string_view text, std::string_view what) {
  if (text == "TRAINER") return Role::kTrainer;
  if (text == "PSERVER") return Role::kServer;
  if (text == "HETER_TRAINER") return Role::kHeterTrainer;
  fail(what, text, "expected TRAINER, PSERVER or HETER_TRAINER");
}

Role role_of(const EnvMap& env) {
  const auto v = lookup(env, kTrainingRole);
  return v ? parse_role(*v, kTrainingRole) : Role::kTrainer;
}

void set_role(EnvMap& env, Role role) { env[kTrainingRole] = role_value(role); }

std::vector<Endpoint> server_endpoints_of(const EnvMap& env) {
  const auto v = lookup(env, kPserverEndpoints);
  if (!v) return {};
  return parse_endpoint_list(*v, kPserverEndpoints);
}

void set_server_endpoints(EnvMap& env, const std::vector<Endpoint>& servers) {
  if (servers.empty()) {
    env.erase(kPserverEndpoints);
  } else {
    env[kPserverEndpoints] = join_endpoints(servers);
  }
}

std::string source_name(WorkerContract::Source source) {
  switch (source) {
    case WorkerContract::Source::kSlurm:
      return "Slurm (srun)";
    case WorkerContract::Source::kMpi:
      return "Open MPI (mpirun)";
    case WorkerContract::Source::kLaunch:
      break;
  }
  return "launch";
}

namespace {

// The heter stages against heter_endpoints and this process's stage (see WorkerContract).
template <class Bad>
void validate_stages(const WorkerContract& c, Bad bad) {
  if (c.heter_stages.empty()) return;
  std::vector<Endpoint> joined;
  for (const HeterStage& s : c.heter_stages) {
    if (s.endpoints.empty()) bad("a heter stage without workers");
    joined.insert(joined.end(), s.endpoints.begin(), s.endpoints.end());
  }
  if (joined != c.heter_endpoints) {
    bad(std::string("the heter stages' endpoints are not ") + kAllHeterEndpoints + "=" +
        join_endpoints(c.heter_endpoints));
  }
  const int stages = static_cast<int>(c.heter_stages.size()) + 1;
  if (c.role == Role::kTrainer && c.stage != 1) bad("a trainer is in stage 1");
  if (c.role == Role::kHeterTrainer) {
    if (c.stage < 2 || c.stage > stages) {
      bad(std::string(kStageId) + "=" + std::to_string(c.stage) + " must be in [2, " +
          std::to_string(stages) + "]");
    }
    const auto& own = c.heter_stages[static_cast<std::size_t>(c.stage - 2)].endpoints;
    if (std::find(own.begin(), own.end(), c.current) == own.end()) {
      bad(std::string(kCurrentEndpoint) + "=" + quote(c.current.str()) + " is not in stage " +
          std::to_string(c.stage));
    }
  }
}

// The stage variables of a trainer (stage 1) or heter worker (see WorkerContract::heter_stages).
void write_stages(const WorkerContract& c, EnvMap& env) {
  const int stages = static_cast<int>(c.heter_stages.size()) + 1;
  // Stage k's endpoints; stage 1 is the trainers, stage 0 and stages+1 none.
  auto stage_list = [&](int k) -> std::string {
    if (k == 1) return join_endpoints(c.endpoints);
    if (k < 1 || k > stages) return "";
    return join_endpoints(c.heter_stages[static_cast<std::size_t>(k - 2)].endpoints);
  };
  std::string counts = "[" + std::to_string(c.world_size);
  for (const HeterStage& s : c.heter_stages) counts += ", " + std::to_string(s.endpoints.size());
  env[kStageTrainersNum] = counts + "]";  // str() of a Python list, as Paddle writes it
  env[kStageId] = std::to_string(c.stage);
  env[kStageNum] = std::to_string(stages);
  env[kPreviousHeterEndpoints] = stage_list(c.stage - 1);
  env[kNextHeterEndpoints] = stage_list(c.stage + 1);
  env[kHeterDeviceType] =
      c.stage == 1 ? std::string("cpu") : c.heter_stages[static_cast<std::size_t>(c.stage - 2)].device;
}

}  // namespace

void WorkerContract::validate() const {
  auto bad = [](const std::string& msg) { throw EnvError("inconsistent worker contract: " + msg); };
  if (source != Source::kLaunch) {
    // A scheduler's contract (env/scheduler.h): a trainer that knows the store and its place.
    const std::string from = " (contract from " + source_name(source) + ")";
    if (role != Role::kTrainer) bad("only trainers can be started by a scheduler" + from);
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      bad("rank " + std::to_string(rank) + " must be in [0, " + std::to_string(world_size) + ")" +
          from);
    }
    if (endpoints.size() != 1) bad("a scheduler's contract names only the store's endpoint" + from);
    if (local_world_size < 1 || local_rank < 0 || local_rank >= local_world_size ||
        local_world_size > world_size) {
      bad("local rank " + std::to_string(local_rank) + " must be in [0, " +
          std::to_string(local_world_size) + ") with at most " + std::to_string(world_size) +
          " local workers" + from);
    }
    if (rendezvous_timeout.count() <= 0) bad("the rendezvous timeout must be > 0" + from);
    return;
  }
  const bool server = role == Role::kServer;
  const bool heter = role == Role::kHeterTrainer;
  if (world_size < 1) bad(std::string(kTrainersNum) + "=" + std::to_string(world_size) + " must be >= 1");
  if (static_cast<int>(endpoints.size()) != world_size) {
    bad(std::string(kTrainerEndpoints) + " has " + std::to_string(endpoints.size()) +
        " endpoints but " + kTrainersNum + "=" + std::to_string(world_size));
  }
  // The processes of this role: the trainers' list, the servers' or the heter workers'.
  const std::vector<Endpoint>& peers = server ? server_endpoints : heter ? heter_endpoints : endpoints;
  const char* peers_name = server ? kPserverEndpoints : heter ? kAllHeterEndpoints : kTrainerEndpoints;
  const int peer_count = static_cast<int>(peers.size());
  if ((server || heter) && server_endpoints.empty()) {
    bad(std::string("a ") + role_noun(role) + " (" + kTrainingRole + "=" + role_value(role) +
        ") needs " + kPserverEndpoints);
  }
  if (heter && heter_endpoints.empty()) {
    bad(std::string("a heter worker (") + kTrainingRole + "=" + role_value(role) + ") needs " +
        kAllHeterEndpoints);
  }
  if (!heter_endpoints.empty() && server_endpoints.empty()) {
    bad(std::string(kAllHeterEndpoints) + " is set in a job without servers");
  }
  if (rank < 0 || rank >= peer_count) {
    bad(std::string(server ? "server index " : heter ? "heter worker index " : std::string(kTrainerId) + "=") +
        std::to_string(rank) + " must be in [0, " + std::to_string(peer_count) + ")");
  }
  validate_stages(*this, bad);
  if (peers[rank] != current) {
    bad(std::string(kCurrentEndpoint) + "=" + quote(current.str()) + " is not entry " +
        std::to_string(rank) + " of " + peers_name + " (" + quote(peers[rank].str()) + ")");
  }
  if (local_world_size < 1 || local_world_size > peer_count) {
    bad(std::string(kLocalWorldSize) + "=" + std::to_string(local_world_size) + " must be in [1, " +
        std::to_string(peer_count) + "]");
  }
  if (local_rank < 0 || local_rank >= local_world_size) {
    bad(std::string(kLocalRank) + "=" + std::to_string(local_rank) + " must be in [0, " +
        std::to_string(local_world_size) + ")");
  }
  if (gpu && *gpu < 0) bad(std::string(kSelectedGpus) + "=" + std::to_string(*gpu) + " must be >= 0");
  if (rendezvous_timeout.count() <= 0) {
    bad(std::string(kRendezvousTimeoutMs) + "=" + std::to_string(rendezvous_timeout.count()) +
        " must be > 0");
  }
  if (restart_count < 0) bad(std::string(kRestartCount) + " must be >= 0");
  if (nnodes < 1 || node_rank < 0 || node_rank >= nnodes) {
    bad(std::string(kGroupRank) + "=" + std::to_string(node_rank) + " must be in [0, " +
        kGroupWorldSize + "=" + std::to_string(nnodes) + ")");
  }
  if (max_restarts < 0) bad(std::string(kElasticMaxRestarts) + " must be >= 0");
  if (!world_device_ids.empty() && static_cast<int>(world_device_ids.size()) != world_size) {
    bad(std::string(kPaddleWorldDeviceIds) + " has " + std::to_string(world_device_ids.size()) +
        " entries but " + kTrainersNum + "=" + std::to_string(world_size));
  }
  if (gpu && !world_device_ids.empty() && role == Role::kTrainer && world_device_ids[rank] != *gpu) {
    bad(std::string(kPaddleLocalDeviceIds) + "=" + std::to_string(world_device_ids[rank]) +
        " is not " + kSelectedGpus + "=" + std::to_string(*gpu));
  }
  if (run_id.empty() || role_name.empty() || paddle_job_id.empty()) {
    bad(std::string(kElasticRunId) + ", " + kRoleName + " and " + kPaddleJobId +
        " must not be empty");
  }
}

EnvMap to_env(const WorkerContract& c) {
  c.validate();
  if (c.source != WorkerContract::Source::kLaunch) {
    throw EnvError("a contract from " + source_name(c.source) + " cannot be written as variables");
  }
  // Servers and heter workers are not trainers: no trainer id, no torchrun variables.
  const bool server = c.role != Role::kTrainer;
  EnvMap env;
  if (!server) env[kTrainerId] = std::to_string(c.rank);
  env[kTrainersNum] = std::to_string(c.world_size);
  env[kCurrentEndpoint] = c.current.str();
  env[kTrainerEndpoints] = join_endpoints(c.endpoints);
  if (!c.server_endpoints.empty()) {
    set_role(env, c.role);
    env[kPaddleRole] = role_value(c.role);
    set_server_endpoints(env, c.server_endpoints);
    env[kServerPort] = std::to_string(c.current.port);
    env[kPodIp] = c.current.host;
  }
  if (!c.heter_endpoints.empty()) env[kAllHeterEndpoints] = join_endpoints(c.heter_endpoints);
  if (!c.heter_stages.empty() && c.role != Role::kServer) write_stages(c, env);
  if (c.gpu) env[kSelectedGpus] = std::to_string(*c.gpu);
  if (server) env[kPaddleNnodes] = std::to_string(c.nnodes);
  if (!server) {
    env[kRank] = std::to_string(c.rank);
    env[kLocalRank] = std::to_string(c.local_rank);
    env[kWorldSize] = std::to_string(c.world_size);
    env[kLocalWorldSize] = std::to_string(c.local_world_size);
    env[kMasterAddr] = c.endpoints[0].host;
    env[kMasterPort] = std::to_string(c.endpoints[0].port);
    env[kGroupRank] = std::to_string(c.node_rank);
    env[kGroupWorldSize] = std::to_string(c.nnodes);
    env[kRoleRank] = std::to_string(c.rank);
    env[kRoleWorldSize] = std::to_string(c.world_size);
    env[kRoleName] = c.role_name;
    env[kElasticRunId] = c.run_id;
    env[kElasticRestartCount] = std::to_string(c.restart_count);
    env[kElasticMaxRestarts] = std::to_string(c.max_restarts);
    env[kElasticUseAgentStore] = "False";  // Python's str(False), as torchrun writes it
    if (!c.error_file.empty()) env[kElasticErrorFile] = c.error_file;
    // Paddle 2.x.
    env[kPaddleGlobalRank] = std::to_string(c.rank);
    env[kPaddleLocalRank] = std::to_string(c.local_rank);
    env[kPaddleGlobalSize] = std::to_string(c.world_size);
    env[kPaddleLocalSize] = std::to_string(c.local_world_size);
    env[kPaddleNnodes] = std::to_string(c.nnodes);
    env[kPaddleMaster] = c.endpoints[0].str();
    env[kPaddleRankInNode] = std::to_string(c.local_rank);
    std::string world_ids;
    for (int r = 0; r < c.world_size; ++r) {
      const int id = c.world_device_ids.empty() ? r % c.local_world_size : c.world_device_ids[r];
      world_ids += (r ? "," : "") + std::to_string(id);
    }
    env[kPaddleWorldDeviceIds] = world_ids;
    env[kPaddleLocalDeviceIds] =
        std::to_string(c.world_device_ids.empty() ? c.local_rank : c.world_device_ids[c.rank]);
    env[kPaddleJobId] = c.paddle_job_id;
    if (!c.gpu) env[kPaddleDistriBackend] = "gloo";
  }
  if (!c.job_id.empty()) env[kJobId] = c.job_id;
  if (!c.secret.empty()) env[kJobSecret] = c.secret;
  env[kRendezvousTimeoutMs] = std::to_string(c.rendezvous_timeout.count());
  env[kRestartCount] = std::to_string(c.restart_count);
  return env;
}

void virtualize_local_rank(const WorkerContract& c, const std::optional<std::string>& parent_visible,
                           EnvMap& env) {
  const int index = c.gpu.value_or(c.local_rank);
  std::string device = std::to_string(index);
  if (parent_visible) {
    const std::vector<std::string> listed = split(*parent_visible, ',');
    if (index >= static_cast<int>(listed.size())) {
      throw EnvError(std::string(c.gpu ? "GPU " : "local rank ") + std::to_string(index) +
                     " has no entry in CUDA_VISIBLE_DEVICES=" + quote(*parent_visible) +
                     " (--virtual_local_rank)");
    }
    device = std::string(trim(listed[static_cast<std::size_t>(index)]));
  }
  env[kLocalRank] = "0";
  env["CUDA_VISIBLE_DEVICES"] = device;
  if (c.gpu) env[kSelectedGpus] = "0";
  env[kPaddleLocalDeviceIds] = "0";
  std::string world_ids;
  for (int r = 0; r < c.world_size; ++r) world_ids += r ? ",0" : "0";
  env[kPaddleWorldDeviceIds] = world_ids;
}

std::optional<WorkerContract> from_env(const EnvMap& env) {
  const auto id = lookup(env, kTrainerId);
  const auto num = lookup(env, kTrainersNum);
  const auto cur = lookup(env, kCurrentEndpoint);
  const auto eps = lookup(env, kTrainerEndpoints);
  if (!id && !num && !cur && !eps) return std::nullopt;
  WorkerContract c;
  c.role = role_of(env);
  const bool heter = c.role == Role::kHeterTrainer;
  const bool server = c.role != Role::kTrainer;  // a server or a heter worker (see below)
  c.server_endpoints = server_endpoints_of(env);
  if (const auto all = lookup(env, kAllHeterEndpoints); all && !all->empty()) {
    c.heter_endpoints = parse_endpoint_list(*all, kAllHeterEndpoints);
  }
  auto require = [&](const char* name, const std::optional<std::string>& value) {
    if (value) return;
    if (server) {
      throw EnvError(std::string("partial server contract: ") + name + " is not set but " +
                     kTrainingRole + "=" + role_value(c.role) + " (" + kTrainersNum + ", " +
                     kCurrentEndpoint + ", " + kTrainerEndpoints + ", " + kPserverEndpoints +
                     " go together)");
    }
    throw EnvError(std::string("partial worker contract: ") + name +
                   " is not set but other PADDLE_* variables are (" + kTrainerId + ", " +
                   kTrainersNum + ", " + kCurrentEndpoint + ", " + kTrainerEndpoints +
                   " go together)");
  };
  if (!server) require(kTrainerId, id);
  require(kTrainersNum, num);
  require(kCurrentEndpoint, cur);
  require(kTrainerEndpoints, eps);
  if (server) require(kPserverEndpoints, lookup(env, kPserverEndpoints));
  if (heter) require(kAllHeterEndpoints, lookup(env, kAllHeterEndpoints));
  c.world_size = parse_non_negative_int(*num, kTrainersNum);
  if (c.world_size < 1) fail(kTrainersNum, *num, "expected a world size >= 1");
  c.current = parse_endpoint(*cur, kCurrentEndpoint);
  c.endpoints = parse_endpoint_list(*eps, kTrainerEndpoints);
  if (server) {
    const std::vector<Endpoint>& own = heter ? c.heter_endpoints : c.server_endpoints;
    const char* own_name = heter ? kAllHeterEndpoints : kPserverEndpoints;
    const auto it = std::find(own.begin(), own.end(), c.current);
    if (it == own.end()) {
      fail(kCurrentEndpoint, *cur,
           "a " + role_noun(c.role) + "'s endpoint must be one of " + std::string(own_name) +
               "=" + quote(join_endpoints(own)));
    }
    c.rank = static_cast<int>(it - own.begin());
    if (const auto port = lookup(env, kServerPort)) {
      if (*port != std::to_string(c.current.port)) {
        fail(kServerPort, *port,
             "a server's port must be the one of " + std::string(kCurrentEndpoint) + "=" +
                 quote(*cur));
      }
    }
    if (const auto host = lookup(env, kPodIp)) {
      if (*host != c.current.host) {
        fail(kPodIp, *host,
             "a server's host must be the one of " + std::string(kCurrentEndpoint) + "=" +
                 quote(*cur));
      }
    }
  } else {
    c.rank = parse_non_negative_int(*id, kTrainerId);
    if (c.rank >= c.world_size) {
      fail(kTrainerId, *id, "rank must be below " + std::string(kTrainersNum) + "=" + *num);
    }
  }
  if (static_cast<int>(c.endpoints.size()) != c.world_size) {
    fail(kTrainerEndpoints, *eps,
         "has " + std::to_string(c.endpoints.size()) + " endpoints, expected " + kTrainersNum +
             "=" + *num);
  }
  // Local placement: from torchrun's variables when present (trainers only), else derived from
  // the endpoints of this role that share this process's host.
  const std::vector<Endpoint>& peers =
      heter ? c.heter_endpoints : server ? c.server_endpoints : c.endpoints;
  const auto lr = server ? std::nullopt : lookup(env, kLocalRank);
  const auto lws = server ? std::nullopt : lookup(env, kLocalWorldSize);
  if (lr) {
    c.local_rank = parse_non_negative_int(*lr, kLocalRank);
  } else {
    c.local_rank = 0;
    for (int r = 0; r < c.rank; ++r) c.local_rank += peers[r].host == c.current.host;
  }
  if (lws) {
    c.local_world_size = parse_non_negative_int(*lws, kLocalWorldSize);
  } else {
    c.local_world_size = static_cast<int>(std::count_if(
        peers.begin(), peers.end(), [&](const Endpoint& e) { return e.host == c.current.host; }));
  }
  if (auto g = lookup(env, kSelectedGpus); g && !g->empty()) {
    // Paddle allows "0,1" for a process that drives several GPUs; we drive one per worker. Empty
    // is a CPU worker (Paddle 1.8 and the fleet launcher give CPU workers an empty list).
    c.gpu = parse_non_negative_int(*g, kSelectedGpus);
  }
  if (auto v = lookup(env, kJobId)) c.job_id = *v;
  if (auto v = lookup(env, kJobSecret)) c.secret = *v;
  if (auto v = lookup(env, kRendezvousTimeoutMs)) {
    int ms = parse_non_negative_int(*v, kRendezvousTimeoutMs);
    if (ms == 0) fail(kRendezvousTimeoutMs, *v, "expected a timeout > 0 milliseconds");
    c.rendezvous_timeout = std::chrono::milliseconds(ms);
  }
  if (auto v = lookup(env, kRestartCount)) c.restart_count = parse_non_negative_int(*v, kRestartCount);
  c.validate();
  return c;
}

bool FaultSpec::fires(int rank_now, std::int64_t step_now, int restart_count) const {
  return rank_now == rank && step_now == step && (!restart || *restart == restart_count);
}

FaultSpec parse_fault_spec(std::string_view text) {
  const std::string expected = "expected rank=R,step=S,(exit=C|abort|hang)[,restart=G]";
  FaultSpec f;
  bool have_rank = false, have_step = false, have_action = false;
  for (std::string_view item : split(text, ',')) {
    std::size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    auto number = [&]() { return parse_non_negative_int(value, std::string(kFault) + " " + std::string(key)); };
    if (key == "rank" && eq != std::string_view::npos) {
      f.rank = number();
      have_rank = true;
    } else if (key == "step" && eq != std::string_view::npos) {
      f.step = number();
      have_step = true;
    } else if (key == "restart" && eq != std::string_view::npos) {
      f.restart = number();
    } else if (key == "exit" && eq != std::string_view::npos && !have_action) {
      f.action = FaultSpec::Action::kExit;
      f.exit_code = number();
      have_action = true;
    } else if ((key == "abort" || key == "hang") && eq == std::string_view::npos && !have_action) {
      f.action = key == "abort" ? FaultSpec::Action::kAbort : FaultSpec::Action::kHang;
      have_action = true;
    } else {
      fail(kFault, text, "unknown or repeated item '" + std::string(item) + "'; " + expected);
    }
  }
  if (!have_rank || !have_step || !have_action) fail(kFault, text, expected);
  return f;
}

std::optional<FaultSpec> fault_spec(const EnvMap& env) {
  auto v = lookup(env, kFault);
  if (!v) return std::nullopt;
  return parse_fault_spec(*v);
}

std::optional<std::string> log_level(const EnvMap& env) { return lookup(env, kLogLevel); }

int default_omp_threads(int cores, int local_workers) {
  if (local_workers < 1) local_workers = 1;
  return std::max(1, cores / local_workers);
}

}  // namespace ddl::env
