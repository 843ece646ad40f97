// The pre-flight check's rules (--preflight): which nodes test their links together in which
// round, what each node reports, and which nodes the numbers name. Pure; no I/O. The measuring
// (probes.h) and the exchange through the control plane (launcher/job/preflight_run.h) are
// elsewhere.
//
// Before a generation starts, every member node measures its compute (a matmul on its CPU, the
// same fixed wall-clock window on every node, all at once) and its links in ceil(log2 n) rounds:
// in round r the node at position p sends to position (p + 2^r) mod n while it receives from
// (p - 2^r) mod n, so every node sends once and receives once a round, and over the rounds meets
// log2 n partners each way (all pairs would be n - 1 rounds; DLRover's pairwise check, in
// O(log n)). A link is measured by its sending side.
//
// A node is named when
// - its matmul rate is below the nodes' median divided by `ratio` (default 2, DLRover's), or
// - every link it sent on and every link it received on failed (it cannot be reached), or
// - with three nodes or more, the best link it sent on, or the best it received on, is below the
//   nodes' median of the same divided by kLinkRatio (a slow node slows every link it is on; its
//   partners have other, good links). Links get a wider margin than compute: equal links between
//   network namespaces of one 2-core machine measured up to 4.4x apart, while the faults worth
//   stopping for are an order of magnitude (a link at 1 Gb/s among 10 Gb/s ones, a throttled or
//   failing one).
// Two nodes share their only links, so a slow link cannot be pinned on either of them, and a
// failed one names both. Nodes on one machine (the same address, or both on loopback) have no
// link between them to measure: check.cpp skips those pairs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddl::launcher::preflight {

// Where position `position` sends in round `round` of `count` nodes (> 1), and whom it hears from.
int send_to(int position, int round, int count);
int receive_from(int position, int round, int count);
// A node's best link below the median divided by this is named.
inline constexpr double kLinkRatio = 10;

// How many rounds `count` nodes take: ceil(log2(count)), 0 for one node.
int rounds(int count);

// One link as its sending side measured it.
struct LinkCheck {
  int peer = -1;                          // the receiving node's rank
  std::optional<double> megabytes_per_s;  // nullopt: failed
  double round_trip_ms = 0;               // of a one-byte exchange before the transfer
  std::string error;                      // why it failed
};

// What one node reports.
struct NodeCheck {
  int node = -1;
  double gflops = 0;             // its matmul's rate
  std::vector<LinkCheck> links;  // the links it sent on
};

// "gflops=12.5;link=2,840.1,0.12;link=3,fail,0,connection refused": one node's check as the control
// plane carries it (the node rank is the record's writer). decode() throws std::invalid_argument.
std::string encode(const NodeCheck& check);
NodeCheck decode(int node, const std::string& payload);

struct Named {
  int node = -1;
  std::string why;  // "its matmul runs at 1.2 GFLOP/s against the median 9.8 (below 1/2 of it)"
};

// What the verdict saw of one node.
struct NodeScore {
  int node = -1;
  double gflops = 0;
  std::optional<double> best_sent;      // MB/s; nullopt: every link it sent on failed (or none)
  std::optional<double> best_received;  // the same for the links it received on
};

struct Verdict {
  std::vector<Named> named;      // ascending node ranks
  std::vector<NodeScore> nodes;  // ascending node ranks
  double median_gflops = 0;
  std::optional<double> median_sent;      // of the nodes' best_sent; none without links
  std::optional<double> median_received;  // of the nodes' best_received
  bool passed() const { return named.empty(); }
};

// The nodes' checks (any order) judged with `ratio` (> 1) for compute, kLinkRatio for links.
Verdict judge(std::vector<NodeCheck> checks, double ratio);

// "node 2: its matmul runs at ...; node 5: every link failed (...)".
std::string named_text(const Verdict& verdict);

// What a node does with a verdict that names nodes. Every node decides alike from the same
// verdict and the same job, so that they all act together.
struct JobShape {
  int me = 0;                     // this node's rank
  bool elastic = false;           // --nnodes=MIN:MAX
  int min_nodes = 1;              // MIN
  bool restart_left = false;      // a restart (the next generation) is allowed
  std::optional<int> store_host;  // the node whose launcher hosts the control store, if any
};

enum class Action {
  kGoOn,            // nothing named
  kStop,            // the job cannot go on without the named nodes: every node stops
  kLeave,           // this node is named: it leaves, the others go on in the next generation
  kRestartWithout,  // others are named and leave: this node goes on in the next generation
};

struct Decision {
  Action action = Action::kGoOn;
  std::string line;  // what to say (empty for kGoOn)
};

Decision decide(const Verdict& verdict, int generation, const JobShape& job);

// Why the job cannot go on without `leaving` (node ranks) when `members` nodes take part: empty
// when it can. The pre-flight check's decide() and the eviction of a slow node
// (launcher/coord/engine.h) both ask it.
std::string cannot_go_on_without(const JobShape& job, const std::vector<int>& leaving, int members);

// 3 significant digits, at least the units: 1234, 98.4, 1.25, 0.0312.
std::string figure_text(double value);

}  // namespace ddl::launcher::preflight
