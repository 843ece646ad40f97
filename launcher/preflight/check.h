// The pre-flight check of one generation on this node (--preflight): measure, exchange through
// the control plane, judge (launcher/health/preflight.h). Every member node runs it between
// joining a generation and starting its workers, so every node reaches the same verdict from the
// same numbers.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/coord/control_plane.h"
#include "launcher/health/preflight.h"
#include "launcher/preflight/probes.h"

namespace ddl::launcher::preflight {

struct CheckOptions {
  double ratio = 2;                                     // --preflight_ratio
  std::chrono::milliseconds compute_window{200};        // each node's matmul
  std::chrono::milliseconds link_timeout{5'000};        // each link probe
  std::chrono::milliseconds exchange_timeout{30'000};   // for every member's numbers
  std::chrono::milliseconds link_window = kLinkWindow;  // each link probe streams this long
};

struct CheckResult {
  int generation = 0;
  double seconds = 0;  // this node's time in the check
  Verdict verdict;
};

// Runs the check of `membership`'s generation on this node. Throws ControlError when the numbers
// cannot be exchanged (a member's missing or malformed, the job failed meanwhile), or when this
// node cannot listen for the link probes.
CheckResult run_check(Control& control, const Membership& membership, const CheckOptions& options);

// Whether `hosts` (each member's address) are on more than one machine: two differ and are not
// both loopback. --preflight=auto checks only then; every node reaches the same answer from the
// same membership.
bool spans_machines(const std::vector<std::string>& hosts);

// One line of the numbers: "pre-flight check of generation 0 (3 nodes, 0.31 s): matmul median
// 9.84 GFLOP/s (lowest 9.12, node 2); links out median 2310 MB/s (lowest ...)".
std::string summary_line(const CheckResult& result);

}  // namespace ddl::launcher::preflight
