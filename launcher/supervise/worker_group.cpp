// Boost.Process compiles its vfork() executor only where this is set (Boost 1.74 sets it on no
// platform by itself); WorkerGroup::start asks for it (bp::posix::use_vfork): see there.
#define BOOST_POSIX_HAS_VFORK 1

#include "launcher/supervise/worker_group.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <boost/process/posix.hpp>
#include <cerrno>
#include <cstring>
#include <utility>

#include "env/exit_codes.h"
#include "launcher/supervise/error_file.h"
#include "launcher/supervise/exit_status.h"
#include "launcher/supervise/supervisor_error.h"

namespace ddl::launcher {

namespace asio = boost::asio;
namespace bp = boost::process;

namespace {

// In the forked child: marks every descriptor above the standard streams close-on-exec, so that a
// worker inherits only stdin, stdout and stderr. The launcher's sockets (Boost.Asio opens and
// accepts them without SOCK_CLOEXEC), pipes and files would otherwise live on in the worker and in
// any helper it leaves running (which then keeps the control store's port). Marked rather than
// closed: Boost.Process reports a failed exec through a close-on-exec pipe of its own that must
// stay open until exec. `max_fd` (the descriptor limit, read before fork) bounds the fallback loop
// for kernels older than 5.11 (no CLOSE_RANGE_CLOEXEC). Async-signal-safe.
void inherit_only_standard_streams(int max_fd) {
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  for (int fd = 3; fd < max_fd; ++fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

// Runs in the forked child before exec: own process group, die with the launcher, output to the
// pipe, nothing else inherited, signal state as a fresh process expects it.
void prepare_child(pid_t launcher_pid, int out_fd, int progress_fd, const cpu_set_t* cpus,
                   int max_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork() and prctl(); then nobody would kill us.
  if (::getppid() != launcher_pid) ::_exit(kExitNotFound);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(out_fd, STDERR_FILENO);
  inherit_only_standard_streams(max_fd);
  // ... and the progress pipe, which DDL_PROGRESS_FD names by this number.
  ::fcntl(progress_fd, F_SETFD, 0);
  // Ignored signals stay ignored across exec; the launcher ignores SIGPIPE for itself only.
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // --bind: pinned before exec, so the program and every thread it starts stay on these CPUs.
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) {
    static constexpr char kMessage[] = "launch: --bind: sched_setaffinity failed in the child\n";
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(kExitError);
  }
}

}  // namespace

WorkerGroup::WorkerGroup(asio::io_context& io, std::chrono::milliseconds kill_timeout,
                         Events events)
    : io_(io), events_(std::move(events)), stop_(io, kill_timeout), drain_timer_(io) {}

void WorkerGroup::add(const Worker& worker, ProcessOutput& output) {
  auto p = std::make_unique<Process>();
  p->role = worker.role;
  p->index = worker.index;
  p->name = worker.name();
  p->output = &output;
  p->slot = processes_.size();
  processes_.push_back(std::move(p));
}

void WorkerGroup::rename(std::size_t i, const Worker& worker, ProcessOutput& output) {
  Process& p = *processes_.at(i);
  p.index = worker.index;
  p.name = worker.name();
  p.output = &output;
}

void WorkerGroup::check_restart(const std::vector<Worker>& workers, int restart,
                                bool indices_may_change) const {
  if (workers.size() != processes_.size()) {
    throw SupervisorError("restart " + std::to_string(restart) + " has " +
                          std::to_string(workers.size()) + " worker(s), the job had " +
                          std::to_string(processes_.size()));
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const bool same_role = workers[i].role == processes_[i]->role;
    if (!same_role || (workers[i].index != processes_[i]->index && !indices_may_change)) {
      throw SupervisorError("restart " + std::to_string(restart) + " starts " + workers[i].name() +
                            " where the job had " + processes_[i]->name);
    }
  }
}

void WorkerGroup::begin_generation() {
  if (!watchdog_) watchdog_.emplace();
  for (const auto& p : processes_) {
    if (p->started) watchdog_->release(p->pid);  // reaped and its group SIGKILLed
    p->pid = -1;
    p->started = p->running = false;
    p->status = 0;
    p->usage = {};
    p->recorded_error.reset();
    p->pipe.reset();
    p->progress_pipe.reset();
    p->output_open = false;
  }
  drain_timer_.cancel();
  stop_.reset();
  ++epoch_;
}

bool WorkerGroup::start(std::size_t i, const Worker& worker, std::string& error) {
  Process& p = *processes_.at(i);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = std::string("pipe2: ") + std::strerror(errno);
    return false;
  }
  // The progress pipe: its write end non-blocking (the flag belongs to the open pipe, which the
  // worker shares), so that a worker never waits for the launcher to read.
  int progress[2];
  if (::pipe2(progress, O_CLOEXEC) != 0 || ::fcntl(progress[1], F_SETFL, O_NONBLOCK) != 0) {
    error = std::string("progress pipe: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  const auto close_pipes = [&] {
    for (const int fd : {fds[0], fds[1], progress[0], progress[1]}) ::close(fd);
  };
  bp::environment environment;
  for (const auto& [name, value] : worker.env) environment[name] = value;
  environment[env::kProgressFd] = std::to_string(progress[1]);
  // Built here: the child may not allocate between fork and exec.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : worker.cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
  }
  const bool bound = !worker.cpus.empty();
  p.error_file = env::lookup(worker.env, env::kElasticErrorFile).value_or("");
  if (std::string why; !p.error_file.empty() && !remove_error_file(p.error_file, why)) {
    spdlog::warn("{}: {}", p.name, why);
  }
  const pid_t launcher_pid = ::getpid();
  const int out_fd = fds[1];
  const int progress_fd = progress[1];
  const long open_max = ::sysconf(_SC_OPEN_MAX);
  const int max_fd = open_max > 0 && open_max < (1 << 20) ? static_cast<int>(open_max) : (1 << 20);
  try {
    bp::child child(
        bp::exe = worker.executable, bp::args = worker.args, environment, bp::std_in < bp::null,
        bp::posix::use_vfork,
        bp::extend::on_exec_setup = [launcher_pid, out_fd, progress_fd, max_fd,
                                     bind = bound ? &cpus : nullptr](auto&) {
          prepare_child(launcher_pid, out_fd, progress_fd, bind, max_fd);
        });
    p.pid = child.id();
    child.detach();  // reaped by reap() (SIGCHLD + waitpid)
  } catch (const std::exception& e) {
    close_pipes();
    error = e.what();
    return false;
  }
  ::close(fds[1]);
  ::close(progress[1]);
  // The child did this itself before exec; repeating it closes no race but costs nothing.
  ::setpgid(p.pid, p.pid);
  watchdog_->guard(p.pid);
  stop_.add(p.pid, p.name);
  p.started = true;
  p.running = true;
  p.output_open = true;
  p.last_output = Clock::now();
  p.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, fds[0]);
  p.progress_pipe = std::make_unique<asio::posix::stream_descriptor>(io_, progress[0]);
  p.progress_line.clear();
  p.progress_overlong = false;
  spdlog::debug("started {} as pid {}: {}", p.name, p.pid, worker.executable);
  read_output(p);
  read_progress(p);
  return true;
}

void WorkerGroup::reap() {
  for (const auto& p : processes_) {
    if (!p->running) continue;
    int status = 0;
    pid_t r;
    do {
      r = ::wait4(p->pid, &status, WNOHANG, &p->usage);
    } while (r < 0 && errno == EINTR);
    if (r == 0) continue;
    p->running = false;
    stop_.reaped(p->pid);
    if (r < 0) {
      // Not our child any more (cannot happen unless someone else reaped it).
      spdlog::error("waitpid({} pid {}): {}", p->name, p->pid, std::strerror(errno));
      p->status = 0xff00;  // exit code 255
    } else {
      p->status = status;
    }
    spdlog::debug("{} (pid {}) {}", p->name, p->pid, describe_status(p->status));
    const bool failed = !(WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0);
    if (failed && !p->error_file.empty()) p->recorded_error = read_error_message(p->error_file);
    if (events_.exited) events_.exited(*p);
  }
}

bool WorkerGroup::stop(int signo) { return stop_.begin(signo); }

void WorkerGroup::finish() {
  stop_.finish();  // what is left in a process's group does not outlive the generation
  if (output_closed()) return;
  const int epoch = epoch_;
  drain_timer_.expires_after(kDrainTimeout);
  drain_timer_.async_wait([this, epoch](const boost::system::error_code& ec) {
    if (ec || epoch != epoch_) return;
    for (const auto& p : processes_) {
      if (!p->output_open) continue;
      spdlog::warn(
          "{}'s output is still open after it exited (a process outside its group holds it); "
          "closing it",
          p->name);
      close_output(*p);
    }
    if (events_.output_closed) events_.output_closed();
  });
}

int WorkerGroup::running() const {
  int n = 0;
  for (const auto& p : processes_) n += p->running;
  return n;
}

bool WorkerGroup::output_closed() const {
  for (const auto& p : processes_) {
    if (p->output_open) return false;
  }
  return true;
}

void WorkerGroup::read_output(Process& p) {
  const int epoch = epoch_;
  p.pipe->async_read_some(asio::buffer(p.buffer),
                          [this, &p, epoch](const boost::system::error_code& ec, std::size_t n) {
                            if (epoch == epoch_) on_output(p, ec, n);
                            // else: a closed pipe of an earlier generation
                          });
}

void WorkerGroup::on_output(Process& p, const boost::system::error_code& ec, std::size_t n) {
  if (n > 0) {
    p.last_output = Clock::now();
    p.output->consume(p.buffer.data(), n);
  }
  if (!ec) {
    read_output(p);
  } else if (p.output_open) {  // else the drain closed it and has told Events
    close_output(p);
    if (events_.output_closed) events_.output_closed();
  }
}

void WorkerGroup::read_progress(Process& p) {
  const int epoch = epoch_;
  p.progress_pipe->async_read_some(
      asio::buffer(p.progress_buffer),
      [this, &p, epoch](const boost::system::error_code& ec, std::size_t n) {
        if (epoch != epoch_ || !p.progress_pipe) return;  // an earlier generation's
        if (n > 0) on_progress(p, n);
        if (!ec) {
          read_progress(p);
        } else {
          boost::system::error_code ignored;
          p.progress_pipe->close(ignored);  // EOF: the process and its children are gone
        }
      });
}

void WorkerGroup::on_progress(Process& p, std::size_t n) {
  p.last_output = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    const char c = p.progress_buffer[i];
    if (c != '\n') {
      if (p.progress_line.size() < kMaxProgressBytes) {
        p.progress_line.push_back(c);
      } else {
        p.progress_overlong = true;
      }
      continue;
    }
    if (!p.progress_overlong && events_.progress) events_.progress(p, p.progress_line);
    if (p.progress_overlong) spdlog::debug("{}: a progress line too long, dropped", p.name);
    p.progress_line.clear();
    p.progress_overlong = false;
  }
}

void WorkerGroup::close_output(Process& p) {
  if (!p.output_open) return;
  p.output->finish_line();
  p.output_open = false;
  boost::system::error_code ignored;
  p.pipe->close(ignored);
  if (output_closed()) drain_timer_.cancel();
}

}  // namespace ddl::launcher
