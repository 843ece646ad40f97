#include "launcher/supervise/group_stop.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace ddl::launcher {

GroupStop::GroupStop(boost::asio::io_context& io, std::chrono::milliseconds kill_timeout)
    : timer_(io), kill_timeout_(kill_timeout) {}

void GroupStop::reset() {
  timer_.cancel();
  groups_.clear();
  begun_ = false;
  ++epoch_;
}

void GroupStop::add(pid_t pgid, std::string name) {
  groups_.push_back(Group{pgid, std::move(name), true});
}

void GroupStop::reaped(pid_t pgid) {
  for (Group& g : groups_) {
    if (g.pgid == pgid) g.running = false;
  }
}

bool GroupStop::begin(int signo) {
  if (begun_) return false;
  begun_ = true;
  signal_all(signo);
  const int epoch = epoch_;
  timer_.expires_after(kill_timeout_);
  timer_.async_wait([this, epoch](const boost::system::error_code& ec) {
    if (ec || epoch != epoch_) return;
    for (const Group& g : groups_) {
      if (g.running) {
        spdlog::warn("{} (pid {}) still running {} ms after it was told to stop: SIGKILL", g.name,
                     g.pgid, kill_timeout_.count());
      }
    }
    signal_all(SIGKILL);
  });
  return true;
}

void GroupStop::kill_now() { signal_all(SIGKILL); }

void GroupStop::finish() {
  timer_.cancel();
  signal_all(SIGKILL);
}

void GroupStop::signal_all(int signo) {
  for (const Group& g : groups_) {
    ::kill(-g.pgid, signo);
    // A stopped process (SIGSTOP, the terminal's ^Z) would keep the signal pending until the
    // SIGKILL: wake it so that it hears it now.
    if (signo != SIGKILL && signo != SIGCONT) ::kill(-g.pgid, SIGCONT);
  }
}

}  // namespace ddl::launcher
