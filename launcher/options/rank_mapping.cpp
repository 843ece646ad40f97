#include "launcher/options/rank_mapping.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "env/file.h"
#include "env/host.h"
#include "launcher/options/options.h"

namespace ddl::launcher {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw RankMappingError(
      source + ": " + what +
      R"( (expected {"ip_ranks": [{"ip": "HOST", "ranks": [0, 1, ...]}, ...]}))");
}

// Entry `i` of "ip_ranks": one node.
RankMapping::Node parse_node(const json& entry, std::size_t i, const std::string& source) {
  const std::string where = "ip_ranks[" + std::to_string(i) + "]";
  if (!entry.is_object()) bad(source, where + " is " + entry.dump() + ", not an object");
  const auto ip = entry.find("ip");
  if (ip == entry.end() || !ip->is_string()) {
    bad(source, where + " has no \"ip\" string");
  }
  RankMapping::Node node;
  node.host = ip->get<std::string>();
  if (!env::is_valid_host(node.host)) {
    bad(source, where + ".ip '" + node.host + "' is not " + std::string(env::kHostRule));
  }
  const auto ranks = entry.find("ranks");
  if (ranks == entry.end() || !ranks->is_array() || ranks->empty()) {
    bad(source, where + " (" + node.host + ") has no \"ranks\" list of at least one rank");
  }
  for (const json& r : *ranks) {
    if (!r.is_number_integer() || r.get<long long>() < 0 || r.get<long long>() > 1'000'000) {
      bad(source, where + ".ranks has " + r.dump() + ", not a rank (an integer >= 0)");
    }
    node.ranks.push_back(r.get<int>());
  }
  return node;
}

// Every node once; every rank once; the ranks exactly 0..N-1.
void check_complete(const RankMapping& m, const std::string& source) {
  std::map<std::string, std::size_t> hosts;
  std::map<int, std::string> owner;  // rank -> its node
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    const RankMapping::Node& node = m.nodes[i];
    if (!hosts.emplace(node.host, i).second) {
      bad(source, "ip '" + node.host + "' is listed twice (ip_ranks[" +
                      std::to_string(hosts[node.host]) + "] and ip_ranks[" + std::to_string(i) +
                      "]); give each node one entry with all its ranks");
    }
    for (int r : node.ranks) {
      const auto [at, fresh] = owner.emplace(r, node.host);
      if (!fresh) {
        bad(source, "rank " + std::to_string(r) + " is mapped twice (on " + at->second +
                        (at->second == node.host ? " twice" : " and on " + node.host) + ")");
      }
    }
  }
  const int world = m.world_size();
  for (int r = 0; r < world; ++r) {
    if (owner.count(r) == 0) {
      bad(source, "the " + std::to_string(world) + " ranks must be 0.." +
                      std::to_string(world - 1) + ", but rank " + std::to_string(r) +
                      " is missing (highest mapped: " + std::to_string(owner.rbegin()->first) +
                      ")");
    }
  }
}

}  // namespace

int RankMapping::world_size() const {
  int n = 0;
  for (const Node& node : nodes) n += static_cast<int>(node.ranks.size());
  return n;
}

std::vector<std::string> RankMapping::hosts() const {
  std::vector<std::string> out;
  for (const Node& node : nodes) out.push_back(node.host);
  return out;
}

int RankMapping::node_index(const std::string& host) const {
  const auto it =
      std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.host == host; });
  return static_cast<int>(it - nodes.begin());
}

int RankMapping::max_ranks_per_node() const {
  std::size_t most = 0;
  for (const Node& node : nodes) most = std::max(most, node.ranks.size());
  return static_cast<int>(most);
}

std::string RankMapping::str() const {
  std::string out;
  for (const Node& node : nodes) {
    out += (out.empty() ? "" : ";") + node.host + ":";
    for (std::size_t i = 0; i < node.ranks.size(); ++i) {
      out += (i ? "," : "") + std::to_string(node.ranks[i]);
    }
  }
  return out;
}

bool RankMapping::operator==(const RankMapping& o) const { return str() == o.str(); }

RankMapping parse_rank_mapping(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(source, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) bad(source, "the top level is " + std::string(doc.type_name()));
  const auto list = doc.find("ip_ranks");
  if (list == doc.end() || !list->is_array() || list->empty()) {
    bad(source, "no \"ip_ranks\" list with at least one node");
  }
  RankMapping m;
  for (std::size_t i = 0; i < list->size(); ++i)
    m.nodes.push_back(parse_node((*list)[i], i, source));
  check_complete(m, source);
  return m;
}

RankMapping read_rank_mapping(const std::string& path, const std::string& what) {
  std::string text;
  try {
    text = env::read_regular_file(path, kMaxRankMappingBytes, what);
  } catch (const env::FileError& e) {
    throw RankMappingError(e.what());
  }
  return parse_rank_mapping(text, path);
}

}  // namespace ddl::launcher
