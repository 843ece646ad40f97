// Paddle's rank mapping file (the fleet launcher's --rank_mapping_file, used with
// --enable_auto_mapping): which global ranks run on which node, for jobs whose nodes run
// different numbers of ranks in an order of the user's choosing. The file is JSON:
//
//   {"ip_ranks": [{"ip": "10.0.0.1", "ranks": [0, 1]},
//                 {"ip": "10.0.0.2", "ranks": [2, 3, 4]}]}
//
// The entries are the nodes in node order; a node's ranks are its workers in local rank order
// (the worker at position i has local rank i and device i). parse_rank_mapping() checks what the
// planner relies on and Paddle leaves to chance: every node named once, with a valid address and
// at least one rank; every rank a non-negative integer named once; the ranks together exactly
// 0..N-1. Keys other than "ip_ranks", "ip" and "ranks" are ignored.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "env/error.h"

namespace ddl::launcher {

// A rank mapping file that cannot be used; the message names the file and what is wrong with
// it. `launch` prints it as one line and exits 2.
class RankMappingError : public Error {
 public:
  explicit RankMappingError(const std::string& what)
      : Error(kExitUsage, "bad rank mapping file", what) {}
};

struct RankMapping {
  struct Node {
    std::string host;        // IPv4 address or host name
    std::vector<int> ranks;  // global ranks, local rank order; not empty
  };
  std::vector<Node> nodes;  // node order; not empty

  // All ranks of the job (the sum of the nodes' rank counts).
  int world_size() const;
  std::vector<std::string> hosts() const;
  // The index of the node named `host` in `nodes`, or nodes.size() when none is.
  int node_index(const std::string& host) const;
  // The most ranks any one node runs.
  int max_ranks_per_node() const;
  // "10.0.0.1:0,1;10.0.0.2:2,3,4": the same text on every node that read the same mapping.
  std::string str() const;
  bool operator==(const RankMapping& o) const;
};

// Parses and checks the text of a mapping file; `source` names it in errors (the path).
// Throws RankMappingError.
RankMapping parse_rank_mapping(const std::string& text, const std::string& source);

// The largest mapping file read: a node's entry is some 50 bytes, so this is room for some
// 20,000 nodes, and a file named by mistake (a dataset, /dev/zero) is refused at once.
inline constexpr std::size_t kMaxRankMappingBytes = 1 << 20;

// Reads the file at `path` and parses it; `what` names the flag that gave the path. Throws
// RankMappingError, also for a file that cannot be read, that is not a regular file (a FIFO, a
// device) or that is larger than kMaxRankMappingBytes (env::read_regular_file).
RankMapping read_rank_mapping(const std::string& path,
                              const std::string& what = "--rank_mapping_file");

}  // namespace ddl::launcher
