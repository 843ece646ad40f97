// Fault injection for testing (DDL_FAULT, see env/contract.h): lets a test make one rank of a real
// job exit, abort or hang at a chosen training step, to prove that the launcher and the other
// ranks fail fast and that restarts resume correctly.
#pragma once

#include <cstdint>
#include <optional>

#include "env/contract.h"

namespace ddl {

class FaultInjector {
 public:
  // Reads DDL_FAULT from `vars` (throws env::EnvError when malformed). Inert when it is unset.
  FaultInjector(const env::EnvMap& vars, int rank, int restart_count);

  // Call once per training step with the step number (1 for the first step). When the fault is
  // due, logs it and then exits the process, raises SIGABRT, or sleeps forever; otherwise returns.
  void at_step(std::int64_t step) const;

  bool armed() const { return spec_.has_value(); }

 private:
  std::optional<env::FaultSpec> spec_;
  int rank_;
  int restart_count_;
};

}  // namespace ddl
