#include "launcher/supervise/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

namespace ddl::launcher {

namespace asio = boost::asio;
namespace bp = boost::process;
namespace fs = std::filesystem;

namespace {

// PATH is not part of the worker contract, so it has no constant in env/contract.h; it is read
// from the environment snapshot like every other variable.
constexpr const char* kPathVariable = "PATH";
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// A line longer than this without a newline is emitted as it stands.
constexpr std::size_t kMaxLineBytes = 64 * 1024;
// After the last worker is reaped, how long to wait for its output pipe to reach EOF (a
// grandchild outside the process group may hold it open).
constexpr std::chrono::milliseconds kDrainTimeout{1000};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Writes all of `data` to `fd`; false on error (e.g. EPIPE when the console went away).
bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by " + signal_name(WTERMSIG(status)) + " (exit code " +
           std::to_string(128 + WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Runs in the forked child before exec: own process group, die with the launcher, output to the
// pipe, signal state as a fresh process expects it.
void prepare_child(pid_t launcher_pid, int out_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork() and prctl(); then nobody would kill us.
  if (::getppid() != launcher_pid) ::_exit(127);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(out_fd, STDERR_FILENO);
  // Ignored signals stay ignored across exec; the launcher ignores SIGPIPE for itself only.
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// A helper process that outlives a SIGKILLed launcher just long enough to SIGKILL the workers'
// process groups. PR_SET_PDEATHSIG only reaches the workers themselves; their children (data
// loaders, shells) would survive. The launcher tells the watchdog each group id over a pipe only
// it holds (and, after a restart, which groups are over); EOF without the "done" mark means the
// launcher died. Move-only.
class Watchdog {
 public:
  Watchdog() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      spdlog::warn("no watchdog (pipe2: {}): a SIGKILLed launcher may leave grandchildren behind",
                   std::strerror(errno));
      return;
    }
    // Signals stay blocked across fork() until the child has dropped the launcher's handlers.
    sigset_t all, old;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, &old);
    const pid_t pid = ::fork();
    if (pid == 0) watch(fds[0], old);  // never returns
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) {
      spdlog::warn("no watchdog (fork: {}): a SIGKILLed launcher may leave grandchildren behind",
                   std::strerror(errno));
      ::close(fds[0]);
      ::close(fds[1]);
      return;
    }
    ::close(fds[0]);
    pid_ = pid;
    fd_ = fds[1];
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  Watchdog(Watchdog&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)), fd_(std::exchange(o.fd_, -1)) {}
  Watchdog& operator=(Watchdog&&) = delete;

  // Stops the watchdog without it killing anything (the job is over).
  ~Watchdog() {
    if (fd_ >= 0) {
      send(kDone);
      ::close(fd_);
    }
    if (pid_ <= 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      ::usleep(1000);
    }
  }

  // `group` is to be SIGKILLed if the launcher dies.
  void guard(pid_t group) { tell(group); }

  // `group` is over (reaped and SIGKILLed); its id may be reused by an unrelated process.
  void release(pid_t group) { tell(-group); }

 private:
  static constexpr std::int32_t kDone = 0;

  void tell(std::int32_t value) {
    if (fd_ >= 0 && !send(value)) {
      spdlog::warn("the watchdog is gone: a SIGKILLed launcher may leave grandchildren behind");
      ::close(fd_);
      fd_ = -1;
    }
  }

  bool send(std::int32_t value) {
    return write_all(fd_, reinterpret_cast<const char*>(&value), sizeof value);
  }

  [[noreturn]] static void watch(int fd, const sigset_t& mask) {
    ::dup2(fd, STDIN_FILENO);
    ::close_range(3, ~0U, 0);  // no copies of the launcher's pipes, logs or sockets
    // Ctrl-C in a terminal reaches the launcher's whole process group; the watchdog stays.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    for (int signo : {SIGTERM, SIGCHLD, SIGPIPE}) ::signal(signo, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    std::vector<pid_t> groups;
    std::int32_t value = 0;
    while (true) {
      ssize_t n = ::read(STDIN_FILENO, &value, sizeof value);
      if (n < 0 && errno == EINTR) continue;
      if (n != static_cast<ssize_t>(sizeof value)) break;  // EOF: the launcher is gone
      if (value == kDone) ::_exit(0);
      if (value > 0) {
        groups.push_back(value);
      } else {
        groups.erase(std::remove(groups.begin(), groups.end(), -value), groups.end());
      }
    }
    for (pid_t group : groups) ::kill(-group, SIGKILL);
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int fd_ = -1;
};

using Clock = std::chrono::steady_clock;

// "1", "0.5", "2.25": a duration as a user would type it after --hang_timeout.
std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0;
  return os.str();
}

// "12.0": elapsed seconds with one decimal.
std::string elapsed_text(Clock::duration d) {
  const auto tenths = std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

// One rank of this node. The log file and console settings last for the whole job; everything
// else describes the rank's process in the current generation and is reset on a restart.
struct Worker {
  int rank = 0;
  pid_t pid = -1;  // also the process group id
  bool started = false;
  bool running = false;
  int status = 0;             // wait status once reaped
  bool killed_by_us = false;  // SIGKILL was needed

  std::unique_ptr<asio::posix::stream_descriptor> pipe;
  bool eof = true;
  std::array<char, 16384> buffer{};
  std::string partial;
  std::deque<std::string> tail;
  Clock::time_point last_output;  // start of the process, then its latest output

  int log_fd = -1;
  std::string log_path;
  bool console = false;  // echo lines to stdout
  bool prefix = false;   // ... as "[rank N] line"

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    if (log_fd >= 0) ::close(log_fd);
  }

  // Forgets the previous generation's process (reaped and drained by now).
  void reset_generation() {
    pid = -1;
    started = running = killed_by_us = false;
    status = 0;
    pipe.reset();
    eof = true;
    partial.clear();
    tail.clear();
  }
};

class Job {
 public:
  Job(const SupervisorOptions& options, const GenerationFactory& make_generation)
      : options_(options),
        make_generation_(make_generation),
        signals_(io_, SIGCHLD, SIGINT, SIGTERM),
        kill_timer_(io_),
        drain_timer_(io_),
        hang_timer_(io_) {
    signals_.add(SIGHUP);
  }

  JobOutcome run() {
    const std::vector<WorkerLaunch> launches = make_generation_(0);
    open_logs(launches);
    Watchdog watchdog;
    watchdog_ = &watchdog;
    wait_for_signal();
    if (options_.external_stop) {
      options_.external_stop->set_waker([this] { asio::post(io_, [this] { on_external_stop(); }); });
    }
    start_generation(launches);
    io_.run();
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
    watchdog_ = nullptr;
    return report();
  }

  ~Job() {
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
  }

 private:
  void open_logs(const std::vector<WorkerLaunch>& launches) {
    if (options_.log_dir) {
      std::error_code ec;
      fs::create_directories(*options_.log_dir, ec);
      if (ec || !fs::is_directory(*options_.log_dir)) {
        throw SupervisorError("cannot create --log_dir '" + *options_.log_dir + "': " +
                              (ec ? ec.message() : std::string("exists and is not a directory")));
      }
    }
    for (const WorkerLaunch& l : launches) {
      auto w = std::make_unique<Worker>();
      w->rank = l.rank;
      if (options_.log_dir) {
        w->log_path =
            (fs::path(*options_.log_dir) / ("workerlog." + std::to_string(l.rank))).string();
        w->log_fd = ::open(w->log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (w->log_fd < 0) {
          throw SupervisorError("cannot open log file '" + w->log_path + "' for rank " +
                                std::to_string(l.rank) + ": " + std::strerror(errno));
        }
        w->console = l.rank == 0 && !options_.quiet;
      } else {
        w->console = true;
        w->prefix = true;
      }
      workers_.push_back(std::move(w));
    }
  }

  // Starts every worker of the generation `restarts_` and arms the hang guard.
  void start_generation(const std::vector<WorkerLaunch>& launches) {
    stopping_ = false;
    all_reaped_ = false;
    first_failure_ = nullptr;
    hang_message_.clear();
    if (!launches.empty()) {
      spdlog::info("{}starting {} worker(s) (ranks {}..{}): {}",
                   restarts_ > 0 ? "restart " + std::to_string(restarts_) + " of " +
                                       std::to_string(options_.max_restarts) + ": "
                                 : std::string(),
                   launches.size(), launches.front().rank, launches.back().rank,
                   launches.front().executable);
    }
    for (std::size_t i = 0; i < launches.size() && !stopping_; ++i) {
      start(*workers_[i], launches[i]);
    }
    reap();  // a worker may already be gone
    if (!stopping_) arm_hang_guard(Clock::now() + options_.hang_timeout);
    maybe_finish();
  }

  void start(Worker& w, const WorkerLaunch& l) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      spawn_failed(w, std::string("pipe2: ") + std::strerror(errno));
      return;
    }
    bp::environment environment;
    for (const auto& [name, value] : l.env) environment[name] = value;
    const pid_t launcher_pid = ::getpid();
    const int out_fd = fds[1];
    try {
      bp::child child(
          bp::exe = l.executable, bp::args = l.args, environment, bp::std_in < bp::null,
          bp::extend::on_exec_setup = [launcher_pid, out_fd](auto&) {
            prepare_child(launcher_pid, out_fd);
          });
      w.pid = child.id();
      child.detach();  // we reap it ourselves (SIGCHLD + waitpid)
    } catch (const std::exception& e) {
      ::close(fds[0]);
      ::close(fds[1]);
      spawn_failed(w, e.what());
      return;
    }
    ::close(fds[1]);
    // The child did this itself before exec; repeating it closes no race but costs nothing.
    ::setpgid(w.pid, w.pid);
    watchdog_->guard(w.pid);
    w.started = true;
    w.running = true;
    w.eof = false;
    w.last_output = Clock::now();
    w.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, fds[0]);
    spdlog::debug("started rank {} as pid {}: {}", w.rank, w.pid, l.executable);
    read_output(w);
  }

  void spawn_failed(Worker& w, const std::string& why) {
    spawn_error_ = "could not start rank " + std::to_string(w.rank) + ": " + why;
    spdlog::error("{}", spawn_error_);
    notify_failure(FailureNotice{w.rank, 1, spawn_error_});
    begin_stop(SIGTERM);
  }

  // Tells options_.on_failure, once, that this node's job ends failed.
  void notify_failure(const FailureNotice& notice) {
    if (failure_notified_ || external_ || !options_.on_failure) return;
    failure_notified_ = true;
    try {
      options_.on_failure(notice);
    } catch (const std::exception& e) {
      spdlog::error("could not report the failure to the other nodes: {}", e.what());
    }
  }

  // Another thread asked the job to stop (another node failed).
  void on_external_stop() {
    if (done_ || external_) return;
    auto request = options_.external_stop->requested();
    if (!request) return;
    external_ = request;
    if (!stopping_ && live_workers() > 0) {
      spdlog::error("{}: stopping {} worker(s)", request->second, live_workers());
      begin_stop(SIGTERM);
    }
    maybe_finish();
  }

  void wait_for_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
      if (ec) return;
      if (signo == SIGCHLD) {
        reap();
      } else {
        on_interrupt(signo);
      }
      if (!done_) wait_for_signal();
      maybe_finish();
    });
  }

  // Any of these signals ends the job: no restart follows, whatever state the job is in.
  void on_interrupt(int signo) {
    if (!stopping_) {
      interrupt_ = signo;
      spdlog::warn("received {}: forwarding it to {} worker(s); send it again to kill them at once",
                   signal_name(signo), live_workers());
      notify_failure(FailureNotice{std::nullopt, 128 + signo,
                                   "the launcher was stopped by " + signal_name(signo)});
      begin_stop(signo);
      return;
    }
    // Told again, or told while stopping after a failure: no more patience.
    if (!interrupt_) interrupt_ = signo;
    if (live_workers() > 0) {
      spdlog::warn("received {} while stopping: killing {} worker(s) now", signal_name(signo),
                   live_workers());
      kill_all(SIGKILL);
    }
  }

  int live_workers() const {
    int n = 0;
    for (const auto& w : workers_) n += w->running;
    return n;
  }

  // SIGTERM (or the forwarded signal) to every group, SIGKILL after the grace period.
  void begin_stop(int signo) {
    stopping_ = true;
    hang_timer_.cancel();
    for (const auto& w : workers_) {
      if (w->started) ::kill(-w->pid, signo);
    }
    const int generation = restarts_;
    kill_timer_.expires_after(options_.kill_timeout);
    kill_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
      if (ec || generation != restarts_) return;
      for (const auto& w : workers_) {
        if (w->running) {
          spdlog::warn("rank {} (pid {}) still running {} ms after it was told to stop: SIGKILL",
                       w->rank, w->pid, options_.kill_timeout.count());
          w->killed_by_us = true;
        }
      }
      kill_all(SIGKILL);
    });
  }

  void kill_all(int signo) {
    for (const auto& w : workers_) {
      if (w->started) ::kill(-w->pid, signo);
    }
  }

  void reap() {
    for (const auto& w : workers_) {
      if (!w->running) continue;
      int status = 0;
      pid_t r;
      do {
        r = ::waitpid(w->pid, &status, WNOHANG);
      } while (r < 0 && errno == EINTR);
      if (r == 0) continue;
      w->running = false;
      if (r < 0) {
        // Not our child any more (cannot happen unless someone else reaped it).
        spdlog::error("waitpid(rank {} pid {}): {}", w->rank, w->pid, std::strerror(errno));
        w->status = 0xff00;  // exit code 255
      } else {
        w->status = status;
      }
      const bool failed = !(WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0);
      spdlog::debug("rank {} (pid {}) {}", w->rank, w->pid, describe_status(w->status));
      if (failed && !stopping_) {
        first_failure_ = w.get();
        spdlog::error("rank {} (pid {}) {}: stopping the other {} worker(s)", w->rank, w->pid,
                      describe_status(w->status), live_workers());
        if (restarts_ >= options_.max_restarts) {
          notify_failure(FailureNotice{w->rank, exit_code_of(w->status),
                                       "rank " + std::to_string(w->rank) + " " +
                                           describe_status(w->status)});
        }
        begin_stop(SIGTERM);
      }
    }
  }

  // The hang guard: wakes up when the newest output of any running rank is hang_timeout old.
  void arm_hang_guard(Clock::time_point when) {
    if (options_.hang_timeout.count() <= 0) return;
    const int generation = restarts_;
    hang_timer_.expires_at(when);
    hang_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
      if (ec || generation != restarts_ || stopping_) return;
      check_hang();
    });
  }

  void check_hang() {
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> newest;
    for (const auto& w : workers_) {
      if (w->running && (!newest || w->last_output > *newest)) newest = w->last_output;
    }
    if (!newest) return;  // everyone has exited; maybe_finish() takes it from here
    if (now - *newest < options_.hang_timeout) {
      arm_hang_guard(*newest + options_.hang_timeout);
      return;
    }
    std::ostringstream os;
    os << "hang guard: no output from any rank for " << seconds_text(options_.hang_timeout)
       << " s; silent: rank" << (live_workers() > 1 ? "s " : " ");
    bool first = true;
    for (const auto& w : workers_) {
      if (!w->running) continue;
      os << (first ? "" : ", ") << w->rank << " (" << elapsed_text(now - w->last_output) << " s)";
      first = false;
    }
    hang_message_ = os.str();
    spdlog::error("{}; stopping {} worker(s)", hang_message_, live_workers());
    if (restarts_ >= options_.max_restarts) {
      notify_failure(FailureNotice{std::nullopt, kHangExitCode, hang_message_});
    }
    begin_stop(SIGTERM);
  }

  void read_output(Worker& w) {
    const int generation = restarts_;
    w.pipe->async_read_some(
        asio::buffer(w.buffer),
        [this, &w, generation](const boost::system::error_code& ec, std::size_t n) {
          if (generation != restarts_) return;  // a closed pipe of an earlier generation
          if (n > 0) consume(w, w.buffer.data(), n);
          if (ec) {
            close_output(w);
            maybe_finish();
            return;
          }
          read_output(w);
        });
  }

  void consume(Worker& w, const char* data, std::size_t n) {
    w.last_output = Clock::now();
    if (w.log_fd >= 0 && !write_all(w.log_fd, data, n)) {
      spdlog::error("writing {} failed: {}; rank {}'s further output is dropped", w.log_path,
                    std::strerror(errno), w.rank);
      ::close(w.log_fd);
      w.log_fd = -1;
    }
    std::size_t start = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (data[i] != '\n') continue;
      w.partial.append(data + start, i - start);
      emit_line(w);
      start = i + 1;
    }
    w.partial.append(data + start, n - start);
    if (w.partial.size() >= kMaxLineBytes) emit_line(w);
  }

  void emit_line(Worker& w) {
    std::string line;
    line.swap(w.partial);
    if (w.console && console_ok_) {
      std::string out;
      if (w.prefix) out = "[rank " + std::to_string(w.rank) + "] ";
      out += line;
      out += '\n';
      console_ok_ = write_all(STDOUT_FILENO, out.data(), out.size());
    }
    w.tail.push_back(std::move(line));
    if (static_cast<int>(w.tail.size()) > kSummaryTailLines) w.tail.pop_front();
  }

  void close_output(Worker& w) {
    if (w.eof) return;
    if (!w.partial.empty()) emit_line(w);
    w.eof = true;
    boost::system::error_code ignored;
    w.pipe->close(ignored);
  }

  // Everything reaped: clean up stragglers in the groups, give the pipes a moment to drain, then
  // restart or stop.
  void maybe_finish() {
    if (done_ || restart_pending_ || live_workers() > 0) return;
    if (!all_reaped_) {
      all_reaped_ = true;
      kill_timer_.cancel();
      hang_timer_.cancel();
      kill_all(SIGKILL);  // grandchildren left in a worker's group do not outlive the job
      const int generation = restarts_;
      drain_timer_.expires_after(kDrainTimeout);
      drain_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
        if (ec || generation != restarts_) return;
        for (const auto& w : workers_) {
          if (!w->eof) {
            spdlog::warn(
                "rank {}'s output is still open after it exited (a process outside its "
                "group holds it); closing it",
                w->rank);
            close_output(*w);
          }
        }
        maybe_finish();
      });
    }
    for (const auto& w : workers_) {
      if (!w->eof) return;
    }
    drain_timer_.cancel();
    if (should_restart()) {
      // Posted, so that no handler of the ending generation is still on the stack.
      restart_pending_ = true;
      asio::post(io_, [this] { restart(); });
      return;
    }
    done_ = true;
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    io_.stop();
  }

  bool failed() const { return first_failure_ != nullptr || !hang_message_.empty(); }

  bool should_restart() const {
    if (!failed() || !spawn_error_.empty() || restarts_ >= options_.max_restarts) return false;
    if (external_) {
      spdlog::warn("{}; not restarting: {}", failure_what(), external_->second);
      return false;
    }
    if (interrupt_) {
      spdlog::warn("{}; not restarting: the launcher was stopped by {}", failure_what(),
                   signal_name(*interrupt_));
      return false;
    }
    return true;
  }

  void restart() {
    restart_pending_ = false;
    if (external_) {  // another node failed meanwhile: no restart
      spdlog::warn("{}; not restarting: {}", failure_what(), external_->second);
      done_ = true;
      boost::system::error_code ignored;
      signals_.cancel(ignored);
      io_.stop();
      return;
    }
    if (interrupt_) {  // arrived after the decision; the signal wins
      spdlog::warn("{}; not restarting: the launcher was stopped by {}", failure_what(),
                   signal_name(*interrupt_));
      done_ = true;
      boost::system::error_code ignored;
      signals_.cancel(ignored);
      io_.stop();
      return;
    }
    const int next = restarts_ + 1;
    spdlog::error("{}; restarting the job (restart {} of {}){}", failure_what(), next,
                  options_.max_restarts, failure_details());
    std::vector<WorkerLaunch> launches;
    try {
      launches = make_generation_(next);
      if (launches.size() != workers_.size()) {
        throw SupervisorError("restart " + std::to_string(next) + " has " +
                              std::to_string(launches.size()) + " worker(s), the job had " +
                              std::to_string(workers_.size()));
      }
      for (std::size_t i = 0; i < launches.size(); ++i) {
        if (launches[i].rank != workers_[i]->rank) {
          throw SupervisorError("restart " + std::to_string(next) + " starts rank " +
                                std::to_string(launches[i].rank) + " where the job had rank " +
                                std::to_string(workers_[i]->rank));
        }
      }
    } catch (const std::exception& e) {
      spawn_error_ = "could not prepare restart " + std::to_string(next) + ": " + e.what();
      spdlog::error("{}", spawn_error_);
      done_ = true;
      boost::system::error_code ignored;
      signals_.cancel(ignored);
      io_.stop();
      return;
    }
    const std::string separator = "==== restart " + std::to_string(next) + " ====\n";
    bool echoed = false;
    for (const auto& w : workers_) {
      if (w->started) watchdog_->release(w->pid);  // reaped and its group SIGKILLed
      w->reset_generation();
      if (w->log_fd >= 0 && !write_all(w->log_fd, separator.data(), separator.size())) {
        spdlog::error("writing {} failed: {}; rank {}'s further output is dropped", w->log_path,
                      std::strerror(errno), w->rank);
        ::close(w->log_fd);
        w->log_fd = -1;
      }
      if (w->console && console_ok_ && !echoed) {
        console_ok_ = write_all(STDOUT_FILENO, separator.data(), separator.size());
        echoed = true;
      }
    }
    restarts_ = next;
    start_generation(launches);
  }

  // What ended the current generation, e.g. "rank 1 exited with code 3".
  std::string failure_what() const {
    if (first_failure_) {
      return "rank " + std::to_string(first_failure_->rank) + " " +
             describe_status(first_failure_->status);
    }
    return hang_message_;
  }

  // Where to look: "; log: ...; its last N line(s):\n    ..." for a failed rank, each rank's log
  // and last line for the hang guard.
  std::string failure_details() const {
    std::ostringstream os;
    if (first_failure_) {
      const Worker& w = *first_failure_;
      os << "; log: " << (w.log_path.empty() ? std::string("console (no --log_dir)") : w.log_path);
      if (w.tail.empty()) {
        os << "; it printed nothing";
      } else {
        os << "; its last " << w.tail.size() << " line(s):";
        for (const std::string& line : w.tail) os << "\n    " << line;
      }
      return os.str();
    }
    os << "; logs:";
    for (const auto& w : workers_) {
      os << "\n    rank " << w->rank << " ("
         << (w->log_path.empty() ? std::string("console") : w->log_path) << "): "
         << (w->tail.empty() ? std::string("printed nothing") : "last line: " + w->tail.back());
    }
    return os.str();
  }

  JobOutcome report() {
    JobOutcome out;
    out.restarts = restarts_;
    const std::string after =
        restarts_ > 0 ? " after " + std::to_string(restarts_) + " restart(s)" : std::string();
    if (failed()) {
      if (first_failure_) {
        const Worker& w = *first_failure_;
        out.exit_code = exit_code_of(w.status);
        out.failed_rank = w.rank;
        spdlog::error("job failed{}: rank {} (pid {}) {}; launcher exit code {}{}", after, w.rank,
                      w.pid, describe_status(w.status), out.exit_code, failure_details());
      } else {
        out.exit_code = kHangExitCode;
        out.hang = true;
        spdlog::error("job failed{}: {}; launcher exit code {}{}", after, hang_message_,
                      out.exit_code, failure_details());
      }
    }
    if (interrupt_) {
      out.interrupt_signal = interrupt_;
      if (!failed()) {
        out.exit_code = 128 + *interrupt_;
        spdlog::warn("stopped by {}: all {} worker(s) ended; exit code {}",
                     signal_name(*interrupt_), workers_.size(), out.exit_code);
      }
    }
    if (!failed() && !interrupt_ && !spawn_error_.empty()) {
      out.exit_code = 1;
      spdlog::error("job failed: {}", spawn_error_);
    }
    if (external_) {
      out.external_stop = external_->second;
      if (!failed() && !interrupt_ && spawn_error_.empty()) {
        out.exit_code = external_->first;
        spdlog::error("job failed: {}; launcher exit code {}", external_->second, out.exit_code);
      }
    }
    if (out.exit_code != 0) {
      std::optional<int> rank;
      if (first_failure_) rank = first_failure_->rank;
      notify_failure(FailureNotice{rank, out.exit_code,
                                   failed() ? failure_what()
                                   : interrupt_
                                       ? "the launcher was stopped by " + signal_name(*interrupt_)
                                       : spawn_error_});
    }
    if (out.exit_code == 0) {
      spdlog::info("all {} worker(s) exited with code 0{}", workers_.size(), after);
    }
    return out;
  }

  const SupervisorOptions& options_;
  const GenerationFactory& make_generation_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer kill_timer_;
  asio::steady_timer drain_timer_;
  asio::steady_timer hang_timer_;
  std::vector<std::unique_ptr<Worker>> workers_;
  Watchdog* watchdog_ = nullptr;  // lives on run()'s stack

  // Handlers capture the generation they were armed in and do nothing in a later one.
  int restarts_ = 0;
  bool stopping_ = false;
  bool all_reaped_ = false;
  bool done_ = false;
  bool restart_pending_ = false;  // restart() is posted
  bool console_ok_ = true;
  const Worker* first_failure_ = nullptr;  // of the current generation
  std::string hang_message_;               // set when the hang guard failed the generation
  std::optional<int> interrupt_;
  std::string spawn_error_;
  std::optional<std::pair<int, std::string>> external_;  // exit code and reason of a stop request
  bool failure_notified_ = false;
};

}  // namespace

std::string signal_name(int signo) {
  switch (signo) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(signo);
  }
}

std::string launcher_directory() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return self.parent_path().string();
}

std::string find_worker(const std::string& worker, const std::string& launcher_dir,
                        const env::EnvMap& env) {
  if (worker.empty()) throw WorkerNotFoundError("WORKER is empty");
  if (worker.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(worker.c_str(), &st) != 0) {
      throw WorkerNotFoundError("WORKER '" + worker + "' does not exist");
    }
    if (!is_executable_file(worker)) {
      throw WorkerNotFoundError("WORKER '" + worker + "' is not an executable file");
    }
    return worker;
  }
  std::vector<std::string> searched;
  if (!launcher_dir.empty()) {
    const std::string candidate = (fs::path(launcher_dir) / worker).string();
    if (is_executable_file(candidate)) return candidate;
    searched.push_back(launcher_dir);
  }
  const std::string path = env::lookup(env, kPathVariable).value_or(kDefaultPath);
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = (fs::path(dir) / worker).string();
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  std::string where = searched.empty() ? "" : "next to launch (" + searched.front() + ") or ";
  throw WorkerNotFoundError("WORKER '" + worker + "' not found " + where + "on PATH ('" + path +
                            "')");
}

void ExternalStop::request(int exit_code, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (request_) return;
  request_.emplace(exit_code, reason);
  if (wake_) wake_();
}

std::optional<std::pair<int, std::string>> ExternalStop::requested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return request_;
}

void ExternalStop::set_waker(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mutex_);
  wake_ = std::move(wake);
  if (wake_ && request_) wake_();
}

JobOutcome supervise(const GenerationFactory& make_generation, const SupervisorOptions& options) {
  Job job(options, make_generation);
  return job.run();
}

JobOutcome supervise(const std::vector<WorkerLaunch>& workers, const SupervisorOptions& options) {
  return supervise(GenerationFactory([&workers](int) { return workers; }), options);
}

}  // namespace ddl::launcher
