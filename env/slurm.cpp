#include "env/slurm.h"

#include <cctype>

#include "env/host.h"

namespace ddl::env {
namespace {

[[noreturn]] void bad(std::string_view what, std::string_view text, const std::string& why) {
  throw EnvError(std::string(what) + "='" + std::string(text) + "': " + why);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "7" or "01-04" inside brackets -> the names of that range, zero-padded to the lower bound's
// width.
void expand_range(std::string_view item, std::vector<std::string>& out, std::string_view what,
                  std::string_view text) {
  const std::size_t dash = item.find('-');
  const std::string_view lo_text = item.substr(0, dash);
  const std::string_view hi_text =
      dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
  if (!all_digits(lo_text) || !all_digits(hi_text) || lo_text.size() > 9 || hi_text.size() > 9) {
    bad(what, text, "'" + std::string(item) + "' in brackets is not a number or a range N-M");
  }
  const long lo = std::stol(std::string(lo_text));
  const long hi = std::stol(std::string(hi_text));
  if (hi < lo) bad(what, text, "range '" + std::string(item) + "' runs backwards");
  if (static_cast<std::size_t>(hi - lo) >= kMaxHostlistHosts) {
    bad(what, text, "range '" + std::string(item) + "' has more than " +
                        std::to_string(kMaxHostlistHosts) + " hosts");
  }
  for (long v = lo; v <= hi; ++v) {
    std::string digits = std::to_string(v);
    if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
    out.push_back(std::move(digits));
  }
}

// One comma-free (outside brackets) group such as "rack[1-2]-n[01,03]".
void expand_group(std::string_view group, std::vector<std::string>& hosts, std::string_view what,
                  std::string_view text) {
  if (group.empty()) bad(what, text, "empty host name (two commas in a row, or a trailing comma)");
  std::vector<std::string> partial{""};
  std::size_t i = 0;
  while (i < group.size()) {
    if (group[i] == ']') bad(what, text, "']' without '['");
    if (group[i] != '[') {
      const std::size_t next = group.find_first_of("[]", i);
      const std::string_view literal = group.substr(i, next - i);
      for (std::string& p : partial) p.append(literal);
      i = next == std::string_view::npos ? group.size() : next;
      continue;
    }
    const std::size_t close = group.find(']', i);
    if (close == std::string_view::npos) bad(what, text, "'[' without ']'");
    const std::string_view inside = group.substr(i + 1, close - i - 1);
    if (inside.find('[') != std::string_view::npos) bad(what, text, "nested '['");
    if (inside.empty()) bad(what, text, "empty brackets '[]'");
    std::vector<std::string> suffixes;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = inside.find(',', start);
      expand_range(inside.substr(start, comma == std::string_view::npos ? comma : comma - start),
                   suffixes, what, text);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (partial.size() * suffixes.size() + hosts.size() > kMaxHostlistHosts) {
      bad(what, text, "expands to more than " + std::to_string(kMaxHostlistHosts) + " hosts");
    }
    std::vector<std::string> next;
    next.reserve(partial.size() * suffixes.size());
    for (const std::string& p : partial) {
      for (const std::string& s : suffixes) next.push_back(p + s);
    }
    partial.swap(next);
    i = close + 1;
  }
  if (partial.size() + hosts.size() > kMaxHostlistHosts) {
    bad(what, text, "expands to more than " + std::to_string(kMaxHostlistHosts) + " hosts");
  }
  for (std::string& p : partial) hosts.push_back(std::move(p));
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what) {
  if (text.empty()) bad(what, text, "expected a host list such as node[01-04]");
  if (text.find_first_of(" \t\n") != std::string_view::npos) {
    bad(what, text, "white space in a host list");
  }
  std::vector<std::string> hosts;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (depth < 0) bad(what, text, "']' without '['");
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      if (i == text.size() && depth != 0) bad(what, text, "'[' without ']'");
      expand_group(text.substr(start, i - start), hosts, what, text);
      start = i + 1;
    }
  }
  return hosts;
}

std::optional<SlurmNodes> slurm_nodes(const EnvMap& env) {
  const auto list = lookup(env, kSlurmJobNodelist);
  const auto nnodes_text = lookup(env, kSlurmNnodes);
  const auto node_text = lookup(env, kSlurmNodeId);
  if (!list || !nnodes_text || !node_text) return std::nullopt;

  SlurmNodes nodes;
  nodes.hosts = expand_hostlist(*list, kSlurmJobNodelist);
  for (const std::string& host : nodes.hosts) check_host(host, kSlurmJobNodelist, *list);
  const int nnodes = parse_non_negative_int(*nnodes_text, kSlurmNnodes);
  nodes.node_rank = parse_non_negative_int(*node_text, kSlurmNodeId);
  if (static_cast<std::size_t>(nnodes) != nodes.hosts.size()) {
    bad(kSlurmNnodes, *nnodes_text,
        std::string("but ") + kSlurmJobNodelist + "='" + *list + "' names " +
            std::to_string(nodes.hosts.size()) + " host(s)");
  }
  if (nodes.node_rank >= nnodes) {
    bad(kSlurmNodeId, *node_text,
        std::string("expected a node index below ") + kSlurmNnodes + "=" + *nnodes_text);
  }
  for (std::size_t i = 0; i < nodes.hosts.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (nodes.hosts[i] == nodes.hosts[j]) {
        bad(kSlurmJobNodelist, *list, "host '" + nodes.hosts[i] + "' is listed twice");
      }
    }
  }
  if (const auto per_node = lookup(env, kSlurmNtasksPerNode)) {
    if (parse_non_negative_int(*per_node, kSlurmNtasksPerNode) != 1) {
      bad(kSlurmNtasksPerNode, *per_node,
          "launch starts each node's workers itself, so run it once per node "
          "(srun --ntasks-per-node=1 launch ...) and choose the workers with --nproc_per_node");
    }
  }
  nodes.job_id = lookup(env, kSlurmJobId).value_or("");
  return nodes;
}

}  // namespace ddl::env
