#include "launcher/health/preflight.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "env/text.h"

namespace ddl::launcher::preflight {
namespace {

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double parse_double(std::string_view s, const std::string& what) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0) {
    throw std::invalid_argument("expected a number for " + what + ", got '" + std::string(s) + "'");
  }
  return v;
}

int parse_int(std::string_view s, const std::string& what) {
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) {
    throw std::invalid_argument("expected a node rank for " + what + ", got '" + std::string(s) +
                                "'");
  }
  return v;
}

// "1/2": the fraction of the median `ratio` stands for, as the lines say it.
std::string fraction(double ratio) {
  return ratio == std::floor(ratio) ? "1/" + std::to_string(static_cast<int>(ratio))
                                    : figure_text(1 / ratio) + " times";
}

// `value` is below `median` / `ratio`.
bool far_below(std::optional<double> value, std::optional<double> median, double ratio) {
  return value && median && *value < *median / ratio;
}

}  // namespace

int rounds(int count) {
  int r = 0;
  while ((1 << r) < count) ++r;
  return r;
}

int send_to(int position, int round, int count) { return (position + (1 << round)) % count; }

int receive_from(int position, int round, int count) {
  return ((position - (1 << round)) % count + count) % count;
}

std::string encode(const NodeCheck& check) {
  std::string out = "gflops=" + figure_text(check.gflops);
  for (const LinkCheck& l : check.links) {
    // The error's text cannot hold the separators.
    std::string error = l.error;
    std::replace(error.begin(), error.end(), ';', ',');
    out += ";link=" + std::to_string(l.peer) + "," +
           (l.megabytes_per_s ? figure_text(*l.megabytes_per_s) : std::string("fail")) + "," +
           figure_text(l.round_trip_ms) + (l.megabytes_per_s ? "" : "," + error);
  }
  return out;
}

NodeCheck decode(int node, const std::string& payload) {
  NodeCheck check;
  check.node = node;
  bool rate = false;
  std::size_t at = 0;
  while (at <= payload.size()) {
    const std::size_t end = std::min(payload.find(';', at), payload.size());
    const std::string_view field(payload.data() + at, end - at);
    at = end + 1;
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      throw std::invalid_argument("expected key=value, got '" + std::string(field) + "'");
    }
    const std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "gflops") {
      check.gflops = parse_double(value, "gflops");
      rate = true;
    } else if (key == "link") {
      // peer,rate|fail,rtt[,error]
      std::vector<std::string_view> parts;
      std::size_t from = 0;
      for (int i = 0; i < 3; ++i) {
        const std::size_t comma = value.find(',', from);
        parts.push_back(value.substr(
            from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
        if (comma == std::string_view::npos) {
          from = value.size() + 1;
          break;
        }
        from = comma + 1;
      }
      if (parts.size() < 3) {
        throw std::invalid_argument("expected peer,rate,rtt, got '" + std::string(value) + "'");
      }
      LinkCheck l;
      l.peer = parse_int(parts[0], "a link's peer");
      if (parts[1] != "fail") l.megabytes_per_s = parse_double(parts[1], "a link's MB/s");
      l.round_trip_ms = parse_double(parts[2], "a link's round trip");
      if (from <= value.size()) l.error = std::string(value.substr(from));
      check.links.push_back(std::move(l));
    } else {
      throw std::invalid_argument("unknown field '" + std::string(key) + "'");
    }
  }
  if (!rate) throw std::invalid_argument("no gflops field");
  return check;
}

Verdict judge(std::vector<NodeCheck> checks, double ratio) {
  std::sort(checks.begin(), checks.end(),
            [](const NodeCheck& a, const NodeCheck& b) { return a.node < b.node; });
  Verdict v;
  std::map<int, NodeScore> scores;
  std::map<int, int> sent, received, sent_failed, received_failed;
  std::map<int, std::string> errors;  // node -> a failure of a link it was on
  for (const NodeCheck& c : checks) {
    NodeScore& s = scores[c.node];
    s.node = c.node;
    s.gflops = c.gflops;
  }
  auto best = [](std::optional<double>& b, double rate) { b = std::max(b.value_or(0), rate); };
  for (const NodeCheck& c : checks) {
    for (const LinkCheck& l : c.links) {
      if (!scores.count(l.peer)) continue;  // not a member: not counted
      ++sent[c.node];
      ++received[l.peer];
      if (l.megabytes_per_s) {
        best(scores[c.node].best_sent, *l.megabytes_per_s);
        best(scores[l.peer].best_received, *l.megabytes_per_s);
      } else {
        ++sent_failed[c.node];
        ++received_failed[l.peer];
        const std::string why = "node " + std::to_string(c.node) + " -> node " +
                                std::to_string(l.peer) + ": " + l.error;
        errors.emplace(c.node, why);
        errors.emplace(l.peer, why);
      }
    }
  }
  std::vector<double> gflops, best_sent, best_received;
  for (const auto& [node, s] : scores) {
    gflops.push_back(s.gflops);
    if (s.best_sent) best_sent.push_back(*s.best_sent);
    if (s.best_received) best_received.push_back(*s.best_received);
    v.nodes.push_back(s);
  }
  v.median_gflops = median(gflops).value_or(0);
  v.median_sent = median(best_sent);
  v.median_received = median(best_received);
  const bool pin_links = scores.size() >= 3;
  for (const auto& [node, s] : scores) {
    std::vector<std::string> why;
    if (s.gflops < v.median_gflops / ratio) {
      why.push_back("its matmul runs at " + figure_text(s.gflops) + " GFLOP/s against the median " +
                    figure_text(v.median_gflops) + " (below " + fraction(ratio) + " of it)");
    }
    const int links = sent[node] + received[node];
    if (links > 0 && sent_failed[node] + received_failed[node] == links) {
      why.push_back("every link it was on failed (" + errors[node] + ")");
    } else if (pin_links && far_below(s.best_sent, v.median_sent, kLinkRatio)) {
      why.push_back("its best link out runs at " + figure_text(*s.best_sent) +
                    " MB/s against the median " + figure_text(*v.median_sent) + " (below " +
                    fraction(kLinkRatio) + " of it)");
    } else if (pin_links && far_below(s.best_received, v.median_received, kLinkRatio)) {
      why.push_back("its best link in runs at " + figure_text(*s.best_received) +
                    " MB/s against the median " + figure_text(*v.median_received) + " (below " +
                    fraction(kLinkRatio) + " of it)");
    } else if (pin_links && sent[node] > 0 && sent_failed[node] == sent[node]) {
      why.push_back("every link out of it failed (" + errors[node] + ")");
    }
    if (!why.empty()) v.named.push_back({node, env::join(why, "; ")});
  }
  return v;
}

std::string named_text(const Verdict& verdict) {
  std::vector<std::string> parts;
  for (const Named& n : verdict.named)
    parts.push_back("node " + std::to_string(n.node) + ": " + n.why);
  return env::join(parts, "; ");
}

std::string figure_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, value >= 100 ? "%.0f" : "%.3g", value);
  return buf;
}

std::string cannot_go_on_without(const JobShape& job, const std::vector<int>& leaving,
                                 int members) {
  const int left = members - static_cast<int>(leaving.size());
  if (!job.elastic) {
    return "a job with a fixed --nnodes cannot go on without it (--nnodes=MIN:MAX with "
           "--max_restarts lets it)";
  }
  if (job.store_host &&
      std::find(leaving.begin(), leaving.end(), *job.store_host) != leaving.end()) {
    return "node " + std::to_string(*job.store_host) + " hosts the control store";
  }
  if (left < job.min_nodes) {
    return std::to_string(left) + " node(s) would be left, fewer than the " +
           std::to_string(job.min_nodes) + " --nnodes needs";
  }
  if (!job.restart_left) return "no restart is left (--max_restarts) to re-form the job without it";
  return "";
}

Decision decide(const Verdict& verdict, int generation, const JobShape& job) {
  if (verdict.passed()) return {};
  const std::string check = "the pre-flight check of generation " + std::to_string(generation);
  const std::string named = named_text(verdict);
  std::vector<int> leaving;
  for (const Named& n : verdict.named) leaving.push_back(n.node);
  const std::string why_not =
      cannot_go_on_without(job, leaving, static_cast<int>(verdict.nodes.size()));
  if (!why_not.empty()) {
    return {Action::kStop, check + " named " + named + "; the job stops: " + why_not};
  }
  const auto me = std::find_if(verdict.named.begin(), verdict.named.end(),
                               [&](const Named& n) { return n.node == job.me; });
  if (me != verdict.named.end()) {
    return {Action::kLeave, check + " named this node (node " + std::to_string(job.me) +
                                "): " + me->why + "; it leaves, the job goes on without it"};
  }
  return {Action::kRestartWithout,
          check + " named " + named + "; the job goes on without it in the next generation"};
}

}  // namespace ddl::launcher::preflight
