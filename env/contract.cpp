#include "env/contract.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>

extern char** environ;

namespace ddl::env {
namespace {

std::string quote(std::string_view v) { return "'" + std::string(v) + "'"; }

[[noreturn]] void fail(std::string_view what, std::string_view value, std::string_view expected) {
  std::ostringstream os;
  os << what << "=" << quote(value) << ": " << expected;
  throw EnvError(os.str());
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = text.find(sep, start);
    parts.push_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
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

Endpoint parse_endpoint(std::string_view text, std::string_view what) {
  std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    fail(what, text, "expected host:port");
  }
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  if (host.find_first_of(" \t,") != std::string_view::npos) fail(what, text, "bad host in host:port");
  int port = 0;
  const char* end = port_text.data() + port_text.size();
  auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (ec != std::errc() || ptr != end || port < 1 || port > 65535 || port_text[0] == '+') {
    fail(what, text, "expected a port between 1 and 65535 in host:port");
  }
  return Endpoint{std::string(host), static_cast<std::uint16_t>(port)};
}

std::vector<Endpoint> parse_endpoint_list(std::string_view text, std::string_view what) {
  if (text.empty()) fail(what, text, "expected a comma-separated list of host:port");
  std::vector<Endpoint> out;
  for (std::string_view part : split(text, ',')) {
    if (part.empty()) fail(what, text, "empty entry in the endpoint list");
    try {
      out.push_back(parse_endpoint(part, what));
    } catch (const EnvError&) {
      fail(what, text, "entry " + quote(part) + " is not host:port with a port in 1..65535");
    }
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

void WorkerContract::validate() const {
  auto bad = [](const std::string& msg) { throw EnvError("inconsistent worker contract: " + msg); };
  if (world_size < 1) bad(std::string(kTrainersNum) + "=" + std::to_string(world_size) + " must be >= 1");
  if (rank < 0 || rank >= world_size) {
    bad(std::string(kTrainerId) + "=" + std::to_string(rank) + " must be in [0, " +
        std::to_string(world_size) + ")");
  }
  if (static_cast<int>(endpoints.size()) != world_size) {
    bad(std::string(kTrainerEndpoints) + " has " + std::to_string(endpoints.size()) +
        " endpoints but " + kTrainersNum + "=" + std::to_string(world_size));
  }
  if (endpoints[rank] != current) {
    bad(std::string(kCurrentEndpoint) + "=" + quote(current.str()) + " is not entry " +
        std::to_string(rank) + " of " + kTrainerEndpoints + " (" + quote(endpoints[rank].str()) + ")");
  }
  if (local_world_size < 1 || local_world_size > world_size) {
    bad(std::string(kLocalWorldSize) + "=" + std::to_string(local_world_size) + " must be in [1, " +
        std::to_string(world_size) + "]");
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
}

EnvMap to_env(const WorkerContract& c) {
  c.validate();
  EnvMap env;
  env[kTrainerId] = std::to_string(c.rank);
  env[kTrainersNum] = std::to_string(c.world_size);
  env[kCurrentEndpoint] = c.current.str();
  env[kTrainerEndpoints] = join_endpoints(c.endpoints);
  if (c.gpu) env[kSelectedGpus] = std::to_string(*c.gpu);
  env[kRank] = std::to_string(c.rank);
  env[kLocalRank] = std::to_string(c.local_rank);
  env[kWorldSize] = std::to_string(c.world_size);
  env[kLocalWorldSize] = std::to_string(c.local_world_size);
  env[kMasterAddr] = c.endpoints[0].host;
  env[kMasterPort] = std::to_string(c.endpoints[0].port);
  if (!c.job_id.empty()) env[kJobId] = c.job_id;
  if (!c.secret.empty()) env[kJobSecret] = c.secret;
  env[kRendezvousTimeoutMs] = std::to_string(c.rendezvous_timeout.count());
  env[kRestartCount] = std::to_string(c.restart_count);
  return env;
}

std::optional<WorkerContract> from_env(const EnvMap& env) {
  const auto id = lookup(env, kTrainerId);
  const auto num = lookup(env, kTrainersNum);
  const auto cur = lookup(env, kCurrentEndpoint);
  const auto eps = lookup(env, kTrainerEndpoints);
  if (!id && !num && !cur && !eps) return std::nullopt;
  for (const auto& [name, value] : {std::pair{kTrainerId, &id}, std::pair{kTrainersNum, &num},
                                    std::pair{kCurrentEndpoint, &cur},
                                    std::pair{kTrainerEndpoints, &eps}}) {
    if (!*value) {
      throw EnvError(std::string("partial worker contract: ") + name +
                     " is not set but other PADDLE_* variables are (" + kTrainerId + ", " +
                     kTrainersNum + ", " + kCurrentEndpoint + ", " + kTrainerEndpoints +
                     " go together)");
    }
  }
  WorkerContract c;
  c.rank = parse_non_negative_int(*id, kTrainerId);
  c.world_size = parse_non_negative_int(*num, kTrainersNum);
  if (c.world_size < 1) fail(kTrainersNum, *num, "expected a world size >= 1");
  c.current = parse_endpoint(*cur, kCurrentEndpoint);
  c.endpoints = parse_endpoint_list(*eps, kTrainerEndpoints);
  if (c.rank >= c.world_size) {
    fail(kTrainerId, *id, "rank must be below " + std::string(kTrainersNum) + "=" + *num);
  }
  if (static_cast<int>(c.endpoints.size()) != c.world_size) {
    fail(kTrainerEndpoints, *eps,
         "has " + std::to_string(c.endpoints.size()) + " endpoints, expected " + kTrainersNum +
             "=" + *num);
  }
  // Local placement: from torchrun's variables when present, else derived from the endpoints
  // that share this rank's host.
  if (auto lr = lookup(env, kLocalRank)) {
    c.local_rank = parse_non_negative_int(*lr, kLocalRank);
  } else {
    c.local_rank = 0;
    for (int r = 0; r < c.rank; ++r) c.local_rank += c.endpoints[r].host == c.current.host;
  }
  if (auto lws = lookup(env, kLocalWorldSize)) {
    c.local_world_size = parse_non_negative_int(*lws, kLocalWorldSize);
  } else {
    c.local_world_size = static_cast<int>(std::count_if(
        c.endpoints.begin(), c.endpoints.end(),
        [&](const Endpoint& e) { return e.host == c.current.host; }));
  }
  if (auto g = lookup(env, kSelectedGpus)) {
    // Paddle allows "0,1" for a process that drives several GPUs; we drive one per worker.
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
