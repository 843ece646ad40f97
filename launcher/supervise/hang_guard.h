// The hang guard: a generation fails when no running process of the group has written anything
// for hang_timeout (0 turns the guard off). Armed when a generation starts, it wakes up when the
// newest output of any running process would be hang_timeout old, and looks again. Single-
// threaded: on the io_context's thread, like the group it watches.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

class HangGuard {
 public:
  // `watching()`: asked at every wake-up; false ends this watch (another generation, a stop, the
  // servers' grace). `hung(message)`: the group is silent; `message` is describe_hang()'s.
  using Watching = std::function<bool()>;
  using Hung = std::function<void(const std::string& message)>;

  // `group` must outlive the guard.
  HangGuard(boost::asio::io_context& io, std::chrono::milliseconds timeout,
            const WorkerGroup& group);

  // Watches from now on, replacing an earlier watch. Nothing happens when the timeout is 0, or
  // once every process has exited.
  void arm(Watching watching, Hung hung);
  void cancel() { timer_.cancel(); }

 private:
  void wake_at(std::chrono::steady_clock::time_point when, Watching watching, Hung hung);

  boost::asio::steady_timer timer_;
  std::chrono::milliseconds timeout_;
  const WorkerGroup& group_;
};

}  // namespace ddl::launcher
