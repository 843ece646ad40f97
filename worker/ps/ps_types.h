// What the parameter server's two halves (parameter_server.h, parameter_client.h) share: the
// update mode, the error type and the deadlines.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

#include "env/error.h"

namespace ddl::ps {

// sync: every step each server waits for all trainers' gradients, averages them in trainer order,
// applies the optimizer once and answers every trainer with the new parameters (the same update
// as collective data parallel). async: each trainer's gradients are applied as they arrive and
// only that trainer is answered; trainers never wait for each other.
enum class UpdateMode { kSync, kAsync };

std::string mode_name(UpdateMode mode);  // "sync" / "async"
// Parses "sync" / "async"; throws std::invalid_argument quoting anything else.
UpdateMode parse_mode(std::string_view text);

// A parameter-server failure on either side: a peer that is gone, stalled or disagrees. The
// message names this process ("server 1", "trainer 0"), the peer and what was expected.
// A program ends with kExitParallel for it ("parameter server: ...").
class PsError : public Error {
 public:
  explicit PsError(const std::string& what) : Error(kExitParallel, "parameter server", what) {}
};

struct Deadlines {
  // Every trainer must connect and register with every server within this time.
  std::chrono::milliseconds join{300'000};
  // A sync step must gather every trainer's gradients within this time, and a trainer that has
  // not finished may not be silent (no request in flight) for longer than this.
  std::chrono::milliseconds step{120'000};
  // Once a trainer has finished it waits at most this long for the others to finish (async
  // trainers may be far apart; a silent trainer is still caught by `step`).
  std::chrono::milliseconds finish{1'800'000};
  // Beyond each request's own wait: how long a reply may take on the wire.
  std::chrono::milliseconds io{60'000};
};

}  // namespace ddl::ps
