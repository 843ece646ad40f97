#include "launcher/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
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
// it holds; EOF without the "done" mark means the launcher died. Move-only.
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
  void guard(pid_t group) {
    if (fd_ >= 0 && !send(group)) {
      spdlog::warn("the watchdog is gone: a SIGKILLed launcher may leave grandchildren behind");
      ::close(fd_);
      fd_ = -1;
    }
  }

 private:
  static constexpr std::int32_t kDone = 0;

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
      groups.push_back(value);
    }
    for (pid_t group : groups) ::kill(-group, SIGKILL);
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int fd_ = -1;
};

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
};

class Job {
 public:
  explicit Job(const SupervisorOptions& options)
      : options_(options),
        signals_(io_, SIGCHLD, SIGINT, SIGTERM),
        kill_timer_(io_),
        drain_timer_(io_) {
    signals_.add(SIGHUP);
  }

  JobOutcome run(const std::vector<WorkerLaunch>& launches) {
    open_logs(launches);
    Watchdog watchdog;
    watchdog_ = &watchdog;
    wait_for_signal();
    if (!launches.empty()) {
      spdlog::info("starting {} worker(s) (ranks {}..{}): {}", launches.size(),
                   launches.front().rank, launches.back().rank, launches.front().executable);
    }
    for (std::size_t i = 0; i < launches.size() && !stopping_; ++i) {
      start(*workers_[i], launches[i]);
    }
    reap();  // a worker may already be gone
    maybe_finish();
    io_.run();
    watchdog_ = nullptr;
    return report();
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
    w.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, fds[0]);
    spdlog::debug("started rank {} as pid {}: {}", w.rank, w.pid, l.executable);
    read_output(w);
  }

  void spawn_failed(Worker& w, const std::string& why) {
    spawn_error_ = "could not start rank " + std::to_string(w.rank) + ": " + why;
    spdlog::error("{}", spawn_error_);
    begin_stop(SIGTERM);
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

  void on_interrupt(int signo) {
    if (!stopping_) {
      interrupt_ = signo;
      spdlog::warn("received {}: forwarding it to {} worker(s); send it again to kill them at once",
                   signal_name(signo), live_workers());
      begin_stop(signo);
      return;
    }
    if (!interrupt_) interrupt_ = signo;
    if (live_workers() > 0) {
      spdlog::warn("received {} again: killing {} worker(s) now", signal_name(signo),
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
    for (const auto& w : workers_) {
      if (w->started) ::kill(-w->pid, signo);
    }
    kill_timer_.expires_after(options_.kill_timeout);
    kill_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
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
        begin_stop(SIGTERM);
      }
    }
  }

  void read_output(Worker& w) {
    w.pipe->async_read_some(asio::buffer(w.buffer),
                            [this, &w](const boost::system::error_code& ec, std::size_t n) {
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

  // Everything reaped: clean up stragglers in the groups, give the pipes a moment to drain, stop.
  void maybe_finish() {
    if (done_ || live_workers() > 0) return;
    if (!all_reaped_) {
      all_reaped_ = true;
      kill_timer_.cancel();
      kill_all(SIGKILL);  // grandchildren left in a worker's group do not outlive the job
      drain_timer_.expires_after(kDrainTimeout);
      drain_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;
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
    done_ = true;
    drain_timer_.cancel();
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    io_.stop();
  }

  JobOutcome report() {
    JobOutcome out;
    if (first_failure_) {
      const Worker& w = *first_failure_;
      out.exit_code = exit_code_of(w.status);
      out.failed_rank = w.rank;
      std::ostringstream os;
      os << "job failed: rank " << w.rank << " (pid " << w.pid << ") " << describe_status(w.status)
         << "; launcher exit code " << out.exit_code
         << "; log: " << (w.log_path.empty() ? std::string("console (no --log_dir)") : w.log_path);
      if (w.tail.empty()) {
        os << "; it printed nothing";
      } else {
        os << "; its last " << w.tail.size() << " line(s):";
        for (const std::string& line : w.tail) os << "\n    " << line;
      }
      spdlog::error("{}", os.str());
    }
    if (interrupt_) {
      out.interrupt_signal = interrupt_;
      if (!first_failure_) {
        out.exit_code = 128 + *interrupt_;
        spdlog::warn("stopped by {}: all {} worker(s) ended; exit code {}",
                     signal_name(*interrupt_), workers_.size(), out.exit_code);
      }
    }
    if (!first_failure_ && !interrupt_ && !spawn_error_.empty()) {
      out.exit_code = 1;
      spdlog::error("job failed: {}", spawn_error_);
    }
    if (out.exit_code == 0) spdlog::info("all {} worker(s) exited with code 0", workers_.size());
    return out;
  }

  const SupervisorOptions& options_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer kill_timer_;
  asio::steady_timer drain_timer_;
  std::vector<std::unique_ptr<Worker>> workers_;
  Watchdog* watchdog_ = nullptr;  // lives on run()'s stack

  bool stopping_ = false;
  bool all_reaped_ = false;
  bool done_ = false;
  bool console_ok_ = true;
  const Worker* first_failure_ = nullptr;
  std::optional<int> interrupt_;
  std::string spawn_error_;
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

JobOutcome supervise(const std::vector<WorkerLaunch>& workers, const SupervisorOptions& options) {
  Job job(options);
  return job.run(workers);
}

}  // namespace ddl::launcher
