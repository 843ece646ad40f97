#include "launcher/preflight/check.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "net/auth.h"

namespace ddl::launcher::preflight {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPasses = 2;

// Where a member listens for the link probes, as its "preflight-hello" says: "<port> <token>".
struct Listener {
  std::uint16_t port = 0;
  std::string token;
};

Listener parse_hello(int node, const std::string& payload) {
  Listener l;
  const std::size_t space = payload.find(' ');
  unsigned port = 0;
  const char* end = payload.data() + std::min(space, payload.size());
  const auto [at, ec] = std::from_chars(payload.data(), end, port);
  if (space == std::string::npos || ec != std::errc() || at != end || port == 0 || port > 65535) {
    throw ControlError("node " + std::to_string(node) + "'s pre-flight listener is malformed: '" +
                       payload.substr(0, 40) + "'");
  }
  l.port = static_cast<std::uint16_t>(port);
  l.token = payload.substr(space + 1);
  return l;
}

bool loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

bool same_machine(const std::string& a, const std::string& b) {
  return a == b || (loopback(a) && loopback(b));
}

// "median 9.84 GFLOP/s (lowest 9.12, node 2)".
std::string spread(const Verdict& v, const std::string& unit,
                   std::optional<double> NodeScore::*field, std::optional<double> median) {
  if (!median) return "none";
  std::optional<std::pair<double, int>> lowest;
  for (const NodeScore& s : v.nodes) {
    const std::optional<double> value = s.*field;
    const double x = value.value_or(0);
    if (!lowest || x < lowest->first) lowest = std::make_pair(x, s.node);
  }
  return "median " + figure_text(*median) + " " + unit + " (lowest " + figure_text(lowest->first) +
         ", node " + std::to_string(lowest->second) + ")";
}

}  // namespace

CheckResult run_check(Control& control, const Membership& membership, const CheckOptions& options) {
  const auto start = Clock::now();
  const int count = static_cast<int>(membership.nodes.size());
  const int me = membership.position;
  const std::string& host = membership.hosts.at(static_cast<std::size_t>(me));
  std::optional<LinkServer> server;
  const std::string token = net::to_hex(net::sha256(net::random_bytes(16))).substr(0, 32);
  try {
    server.emplace(host, token);
  } catch (const std::exception& e) {
    throw ControlError("the pre-flight check: " + std::string(e.what()));
  }
  // The exchange of the listeners is also the start line: every node measures its compute at
  // the same time, so that nodes sharing a machine share it alike.
  const std::map<int, std::string> hellos =
      control.gather(membership.generation, "preflight-hello",
                     std::to_string(server->port()) + " " + token, options.exchange_timeout);
  NodeCheck mine;
  mine.node = membership.nodes[static_cast<std::size_t>(me)];
  mine.gflops = measure_matmul(options.compute_window);
  // Two passes over the rounds, each link's better figure kept (DLRover checks twice too): a
  // link is slow when it is slow both times, not when one pass met a busy moment.
  std::map<int, LinkCheck> best;  // by the receiving node
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int r = 0; r < rounds(count); ++r) {
      const int to = send_to(me, r, count);
      const int node = membership.nodes[static_cast<std::size_t>(to)];
      // Nodes on one machine (simulated nodes) share its CPUs and memory, not a network: their
      // "link" would measure the scheduler.
      if (same_machine(host, membership.hosts[static_cast<std::size_t>(to)])) continue;
      const Listener theirs = parse_hello(node, hellos.at(node));
      LinkCheck link = probe_link(node, membership.hosts[static_cast<std::size_t>(to)], theirs.port,
                                  theirs.token, options.link_window, options.link_timeout);
      const auto known = best.find(node);
      if (known == best.end() || !known->second.megabytes_per_s ||
          link.megabytes_per_s.value_or(0) > *known->second.megabytes_per_s) {
        best[node] = std::move(link);
      }
    }
  }
  for (auto& [node, link] : best) mine.links.push_back(std::move(link));
  const std::map<int, std::string> numbers =
      control.gather(membership.generation, "preflight", encode(mine), options.exchange_timeout);
  std::vector<NodeCheck> checks;
  for (const auto& [node, payload] : numbers) {
    try {
      checks.push_back(decode(node, payload));
    } catch (const std::invalid_argument& e) {
      throw ControlError("node " + std::to_string(node) + "'s pre-flight numbers are malformed (" +
                         e.what() + ")");
    }
  }
  CheckResult result;
  result.generation = membership.generation.index();
  result.verdict = judge(std::move(checks), options.ratio);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

bool spans_machines(const std::vector<std::string>& hosts) {
  for (const std::string& h : hosts) {
    if (!same_machine(h, hosts.front())) return true;
  }
  return false;
}

std::string summary_line(const CheckResult& result) {
  const Verdict& v = result.verdict;
  std::optional<std::pair<double, int>> slowest;
  for (const NodeScore& s : v.nodes) {
    if (!slowest || s.gflops < slowest->first) slowest = std::make_pair(s.gflops, s.node);
  }
  std::string line = "pre-flight check of generation " + std::to_string(result.generation) + " (" +
                     std::to_string(v.nodes.size()) + " nodes, " + figure_text(result.seconds) +
                     " s): matmul median " + figure_text(v.median_gflops) + " GFLOP/s";
  if (slowest) {
    line += " (lowest " + figure_text(slowest->first) + ", node " +
            std::to_string(slowest->second) + ")";
  }
  if (!v.median_sent && !v.median_received) {
    return line + "; no link measured (the nodes share a machine)";
  }
  line += "; best link out " + spread(v, "MB/s", &NodeScore::best_sent, v.median_sent);
  line += "; best link in " + spread(v, "MB/s", &NodeScore::best_received, v.median_received);
  return line;
}

}  // namespace ddl::launcher::preflight
