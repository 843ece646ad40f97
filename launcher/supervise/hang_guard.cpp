#include "launcher/supervise/hang_guard.h"

#include <optional>
#include <utility>

#include "launcher/supervise/describe.h"

namespace ddl::launcher {

HangGuard::HangGuard(boost::asio::io_context& io, std::chrono::milliseconds timeout,
                     const WorkerGroup& group)
    : timer_(io), timeout_(timeout), group_(group) {}

void HangGuard::arm(Watching watching, Hung hung) {
  wake_at(std::chrono::steady_clock::now() + timeout_, std::move(watching), std::move(hung));
}

void HangGuard::wake_at(std::chrono::steady_clock::time_point when, Watching watching, Hung hung) {
  if (timeout_.count() <= 0) return;
  timer_.expires_at(when);
  timer_.async_wait([this, watching = std::move(watching),
                     hung = std::move(hung)](const boost::system::error_code& ec) {
    if (ec || !watching()) return;
    const auto now = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> newest;
    for (const auto& p : group_.processes()) {
      if (p->running && (!newest || p->last_output > *newest)) newest = p->last_output;
    }
    if (!newest) return;  // everyone has exited
    if (now - *newest < timeout_) {
      wake_at(*newest + timeout_, watching, hung);
      return;
    }
    hung(describe_hang(group_, timeout_, now));
  });
}

}  // namespace ddl::launcher
