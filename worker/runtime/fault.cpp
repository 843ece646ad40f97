#include "worker/runtime/fault.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace ddl {

FaultInjector::FaultInjector(const env::EnvMap& vars, int rank, int restart_count)
    : spec_(env::fault_spec(vars)), rank_(rank), restart_count_(restart_count) {
  if (spec_ && spec_->rank == rank_) {
    spdlog::warn("fault injection armed ({}): this rank fails at step {}", env::kFault, spec_->step);
  }
}

void FaultInjector::at_step(std::int64_t step) const {
  if (!spec_ || !spec_->fires(rank_, step, restart_count_)) return;
  using Action = env::FaultSpec::Action;
  switch (spec_->action) {
    case Action::kExit:
      spdlog::error("fault injection: rank {} exits with code {} at step {}", rank_,
                    spec_->exit_code, step);
      std::_Exit(spec_->exit_code);
    case Action::kAbort:
      spdlog::error("fault injection: rank {} aborts at step {}", rank_, step);
      std::abort();
    case Action::kHang:
      spdlog::error("fault injection: rank {} hangs at step {}", rank_, step);
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

}  // namespace ddl
