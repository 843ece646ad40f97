// The job's state machine on this node: starting a generation, reaping, the hang guard, signals,
// external stops, and asking the restart policy when a generation ends. The pieces it drives live
// next to it: output.h (log fan-out), group_stop.h (the stop sequence), watchdog.h.
#include "launcher/supervise/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
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
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "launcher/diagnose/stacks.h"
#include "launcher/report/run_report.h"
#include "launcher/supervise/exit_status.h"
#include "launcher/supervise/error_file.h"
#include "launcher/supervise/group_stop.h"
#include "launcher/supervise/watchdog.h"

namespace ddl::launcher {

namespace asio = boost::asio;
namespace bp = boost::process;
namespace fs = std::filesystem;

namespace {

// After the last process is reaped, how long to wait for its output pipe to reach EOF (a
// grandchild outside the process group may hold it open).
constexpr std::chrono::milliseconds kDrainTimeout{1000};

using Clock = std::chrono::steady_clock;

WallClock::time_point wall_now() { return WallClock::now(); }

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

// "ranks 0..3" for trainers, "servers 0..1" for servers.
std::string index_range(env::Role role, int first, int last) {
  return (role == env::Role::kServer ? std::string("servers ") : std::string("ranks ")) +
         std::to_string(first) + ".." + std::to_string(last);
}

// One launched process. Its output lasts for the whole job; everything else describes its
// process in the current generation and is reset on a restart.
struct Worker {
  env::Role role = env::Role::kTrainer;
  int index = 0;
  std::string name;  // "rank 3", "server 1"
  pid_t pid = -1;    // also the process group id
  bool started = false;
  bool running = false;
  int status = 0;  // wait status once reaped
  struct rusage usage {};  // once reaped
  std::string error_file;  // TORCHELASTIC_ERROR_FILE; empty when not set
  std::optional<std::string> recorded_error;  // what it wrote there before failing

  std::unique_ptr<asio::posix::stream_descriptor> pipe;
  bool eof = true;
  std::array<char, 16384> buffer{};
  Clock::time_point last_output;  // start of the process, then its latest output
  ProcessOutput* output = nullptr;  // owned by the supervisor, by log name

  // Forgets the previous generation's process (reaped and drained by now).
  void reset_generation() {
    pid = -1;
    started = running = false;
    status = 0;
    usage = {};
    recorded_error.reset();
    pipe.reset();
    eof = true;
  }
};

class Supervisor {
 public:
  Supervisor(const SupervisorOptions& options, const GenerationFactory& make_generation)
      : options_(options),
        make_generation_(make_generation),
        signals_(io_, SIGCHLD, SIGINT, SIGTERM),
        drain_timer_(io_),
        hang_timer_(io_),
        grace_timer_(io_),
        stop_(io_, options.kill_timeout),
        console_(STDOUT_FILENO),
        generation_(options.first_generation) {
    signals_.add(SIGHUP);
    signals_.add(SIGQUIT);  // torchrun forwards it too
    signals_.add(SIGUSR1);
  }

  JobOutcome run() {
    const std::vector<WorkerLaunch> launches = make_generation_(generation_);
    open_outputs(launches);
    Watchdog watchdog;
    watchdog_ = &watchdog;
    wait_for_signal();
    if (options_.external_stop) {
      options_.external_stop->set_waker(
          [this] { asio::post(io_, [this] { on_external_event(); }); });
    }
    start_generation(launches);
    io_.run();
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
    watchdog_ = nullptr;
    JobOutcome out = report();
    finish_report(out);
    return out;
  }

  ~Supervisor() {
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
  }

 private:
  void open_outputs(const std::vector<WorkerLaunch>& launches) {
    if (options_.log_dir) {
      std::error_code ec;
      fs::create_directories(*options_.log_dir, ec);
      if (ec || !fs::is_directory(*options_.log_dir)) {
        throw SupervisorError("cannot create --log_dir '" + *options_.log_dir + "': " +
                              (ec ? ec.message() : std::string("exists and is not a directory")));
      }
    }
    std::set<std::pair<env::Role, int>> seen;
    for (const WorkerLaunch& l : launches) {
      if (!seen.emplace(l.role, l.index).second) {
        throw SupervisorError("two processes of the job are both " + l.name());
      }
      auto w = std::make_unique<Worker>();
      w->role = l.role;
      w->index = l.index;
      w->name = l.name();
      w->output = &output_for(l);
      workers_.push_back(std::move(w));
    }
  }

  // The output of the process named by `l`'s role and index, opened on first use: a log file
  // keeps its name for the whole job, even when an elastic restart gives it to another process.
  ProcessOutput& output_for(const WorkerLaunch& l) {
    auto& slot = outputs_[l.log_name()];
    if (slot) return *slot;
    const std::string prefix = "[" + l.name() + "] ";
    if (options_.log_dir) {
      const bool echo =
          l.echo.value_or(l.role == env::Role::kTrainer && l.index == 0) && !options_.quiet;
      slot = std::make_unique<ProcessOutput>(
          l.name(), (fs::path(*options_.log_dir) / l.log_name()).string(), echo,
          l.prefix_echo ? prefix : "", console_, options_.append_logs);
    } else {
      slot = std::make_unique<ProcessOutput>(l.name(), "", l.echo.value_or(true), prefix, console_);
    }
    if (options_.report) {
      const std::string name = l.name();
      RunReport* report = options_.report;
      slot->on_line([report, name](const std::string& line) { report->process_line(name, line); });
    }
    return *slot;
  }

  // "(ranks 0..3)", "(servers 0..1, ranks 0..1)": the indices of each role, in launch order.
  static std::string describe_indices(const std::vector<WorkerLaunch>& launches) {
    std::string out;
    std::size_t i = 0;
    while (i < launches.size()) {
      std::size_t j = i;
      while (j + 1 < launches.size() && launches[j + 1].role == launches[i].role) ++j;
      out += (out.empty() ? "" : ", ") +
             index_range(launches[i].role, launches[i].index, launches[j].index);
      i = j + 1;
    }
    return "(" + out + ")";
  }

  // Starts every process of the current generation and arms the hang guard.
  void start_generation(const std::vector<WorkerLaunch>& launches) {
    stop_.reset();
    all_reaped_ = false;
    state_ = JobState::kRunning;
    first_failure_ = nullptr;
    hang_message_.clear();
    grace_timer_.cancel();
    server_grace_begun_ = false;
    servers_stopped_ = 0;
    peer_failure_.reset();
    job_succeeded_ = false;
    success_told_ = false;
    if (options_.report) {
      int world_size = 0;
      for (const WorkerLaunch& l : launches) {
        if (l.role != env::Role::kTrainer) continue;
        if (auto v = env::lookup(l.env, env::kWorldSize)) world_size = std::atoi(v->c_str());
        break;
      }
      options_.report->generation_started(generation_.index(), wall_now(), world_size);
    }
    if (!launches.empty()) {
      spdlog::info("{}starting {} worker(s) {}: {}",
                   generation_.first()
                       ? std::string()
                       : "restart " + std::to_string(generation_.index()) + " of " +
                             std::to_string(options_.restart_policy.max_restarts()) + ": ",
                   launches.size(), describe_indices(launches), launches.front().executable);
    }
    for (std::size_t i = 0; i < launches.size() && !stop_.begun(); ++i) {
      start(*workers_[i], launches[i]);
    }
    reap();  // a process may already be gone
    if (!stop_.begun()) arm_hang_guard(Clock::now() + options_.hang_timeout);
    // News about this generation may have come while it was being started.
    on_external_event();
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
    w.error_file = env::lookup(l.env, env::kElasticErrorFile).value_or("");
    if (std::string why; !w.error_file.empty() && !remove_error_file(w.error_file, why)) {
      spdlog::warn("{}: {}", w.name, why);
    }
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
    stop_.add(w.pid, w.name);
    w.started = true;
    w.running = true;
    w.eof = false;
    w.last_output = Clock::now();
    w.pipe = std::make_unique<asio::posix::stream_descriptor>(io_, fds[0]);
    spdlog::debug("started {} as pid {}: {}", w.name, w.pid, l.executable);
    if (options_.report) {
      options_.report->process_started(w.name, w.role == env::Role::kServer, w.index,
                                       generation_.index(), w.pid, wall_now());
    }
    read_output(w);
  }

  // Moves the job to `next` unless the current state outranks it.
  void enter(JobState next) {
    if (overrides(next, state_)) state_ = next;
  }

  GenerationEnd generation_end() const {
    GenerationEnd end;
    end.generation = generation_;
    end.state = state_;
    if (first_failure_) end.failure_exit_code = exit_code_of(first_failure_->status);
    if (!hang_message_.empty()) end.failure_exit_code = kHangExitCode;
    if (!first_failure_ && hang_message_.empty() && peer_failure_) {
      end.failure_exit_code = peer_failure_->first;
    }
    end.interrupt_signal = interrupt_;
    if (external_) {
      end.external_exit_code = external_->first;
      end.external_reason = external_->second;
    }
    return end;
  }

  void spawn_failed(Worker& w, const std::string& why) {
    spawn_error_ = "could not start " + w.name + ": " + why;
    spdlog::error("{}", spawn_error_);
    enter(JobState::kSpawnFailed);
    notify_failure(FailureNotice{rank_of(w), kSpawnFailedExitCode, spawn_error_});
    begin_stop(SIGTERM);
  }

  static std::optional<int> rank_of(const Worker& w) {
    if (w.role == env::Role::kTrainer) return w.index;
    return std::nullopt;
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

  // The generation has just failed: tell the other nodes now when no restart will follow.
  void notify_if_final(std::optional<int> rank, const std::string& what) {
    history_.push_back("generation " + std::to_string(generation_.index()) + ": " + what);
    if (options_.on_generation_failure && !external_) {
      try {
        const std::optional<int> code = generation_end().failure_exit_code;
        options_.on_generation_failure(generation_, FailureNotice{rank, code.value_or(1), what});
      } catch (const std::exception& e) {
        spdlog::error("could not report the failure to the other nodes: {}", e.what());
      }
    }
    const RestartDecision d = options_.restart_policy.decide(generation_end());
    if (!d.restart()) notify_failure(FailureNotice{rank, d.exit_code, what});
  }

  // News from the other nodes: the job is over, this generation failed there, or every node's
  // part of it succeeded.
  void on_external_event() {
    if (done_ || !options_.external_stop) return;
    on_external_stop();
    if (external_ || restart_pending_) return;
    if (auto failure = options_.external_stop->generation_failure(generation_)) {
      if (!peer_failure_ && state_ == JobState::kRunning) {
        peer_failure_ = failure;
        history_.push_back(failure->second);  // "generation K failed on node N: ..."
        enter(JobState::kPeerFailed);
        if (!stop_.begun() && live_workers() > 0) {
          spdlog::error("{}: stopping {} worker(s)", failure->second, live_workers());
          begin_stop(SIGTERM);
        }
      }
    } else if (!job_succeeded_ && options_.external_stop->succeeded(generation_)) {
      job_succeeded_ = true;
    }
    maybe_finish();
  }

  // Another thread asked the job to stop (another node failed for good).
  void on_external_stop() {
    if (done_ || external_) return;
    auto request = options_.external_stop->requested();
    if (!request) return;
    external_ = request;
    enter(JobState::kStoppedExternally);
    if (!stop_.begun() && live_workers() > 0) {
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
      } else if (signo == SIGUSR1) {
        dump_stacks("SIGUSR1 to the launcher");
      } else {
        on_interrupt(signo);
      }
      if (!done_) wait_for_signal();
      maybe_finish();
    });
  }

  // Any of these signals ends the job: no restart follows, whatever state the job is in.
  void on_interrupt(int signo) {
    if (!stop_.begun()) {
      interrupt_ = signo;
      enter(JobState::kInterrupted);
      spdlog::warn("received {}: forwarding it to {} worker(s); send it again to kill them at once",
                   signal_name(signo), live_workers());
      notify_failure(FailureNotice{std::nullopt, 128 + signo,
                                   "the launcher was stopped by " + signal_name(signo)});
      begin_stop(signo);
      return;
    }
    // Told again, or told while stopping after a failure: no more patience.
    if (!interrupt_) interrupt_ = signo;
    enter(JobState::kInterrupted);
    if (live_workers() > 0) {
      spdlog::warn("received {} while stopping: killing {} worker(s) now", signal_name(signo),
                   live_workers());
      stop_.kill_now();
    }
  }

  int live_workers() const {
    int n = 0;
    for (const auto& w : workers_) n += w->running;
    return n;
  }

  void begin_stop(int signo) {
    hang_timer_.cancel();
    grace_timer_.cancel();
    stop_.begin(signo);
  }

  static bool exited_zero(const Worker& w) {
    return w.started && !w.running && WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
  }

  // Servers after the trainers (see supervisor.h): once every trainer exited 0, the servers still
  // running have server_grace to follow; then they are stopped and the generation succeeds.
  void maybe_begin_server_grace() {
    if (server_grace_begun_ || stop_.begun()) return;
    int trainers = 0;
    int servers_running = 0;
    for (const auto& w : workers_) {
      if (w->role == env::Role::kTrainer) {
        if (!exited_zero(*w)) return;
        ++trainers;
      } else {
        servers_running += w->running;
      }
    }
    if (trainers == 0 || servers_running == 0) return;
    server_grace_begun_ = true;
    hang_timer_.cancel();  // the grace bounds the wait from here on
    spdlog::debug("all {} trainer(s) exited with code 0; {} server(s) have {} s to exit", trainers,
                  servers_running, seconds_text(options_.server_grace));
    const Generation generation = generation_;
    grace_timer_.expires_after(options_.server_grace);
    grace_timer_.async_wait([this, generation, trainers](const boost::system::error_code& ec) {
      if (ec || generation != generation_ || stop_.begun()) return;
      servers_stopped_ = live_workers();
      if (servers_stopped_ == 0) return;
      spdlog::info(
          "all {} trainer(s) exited with code 0 and {} server(s) are still running {} s later "
          "(--server_grace): stopping them (SIGTERM, SIGKILL after {} s); the job succeeds",
          trainers, servers_stopped_, seconds_text(options_.server_grace),
          seconds_text(options_.kill_timeout));
      stop_.begin(SIGTERM);
    });
  }

  void reap() {
    for (const auto& w : workers_) {
      if (!w->running) continue;
      int status = 0;
      pid_t r;
      do {
        r = ::wait4(w->pid, &status, WNOHANG, &w->usage);
      } while (r < 0 && errno == EINTR);
      if (r == 0) continue;
      w->running = false;
      stop_.reaped(w->pid);
      if (r < 0) {
        // Not our child any more (cannot happen unless someone else reaped it).
        spdlog::error("waitpid({} pid {}): {}", w->name, w->pid, std::strerror(errno));
        w->status = 0xff00;  // exit code 255
      } else {
        w->status = status;
      }
      const bool failed = !(WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0);
      spdlog::debug("{} (pid {}) {}", w->name, w->pid, describe_status(w->status));
      if (options_.report) {
        ProcessUsage usage;
        usage.cpu_seconds = static_cast<double>(w->usage.ru_utime.tv_sec + w->usage.ru_stime.tv_sec) +
                            static_cast<double>(w->usage.ru_utime.tv_usec + w->usage.ru_stime.tv_usec) / 1e6;
        usage.peak_rss_kib = w->usage.ru_maxrss;
        options_.report->process_exited(w->name, generation_.index(), w->status, usage, wall_now());
      }
      if (failed && !w->error_file.empty()) w->recorded_error = read_error_message(w->error_file);
      if (failed && !stop_.begun() && state_ == JobState::kRunning) {
        first_failure_ = w.get();
        enter(JobState::kWorkerFailed);
        // A rank that gave up at a deadline waited for a peer: the stuck one is still running.
        if (WIFEXITED(w->status) && WEXITSTATUS(w->status) == env::kDeadlineExitCode &&
            live_workers() > 0) {
          dump_stacks(w->name + " exited with code " + std::to_string(env::kDeadlineExitCode) +
                      " (a rendezvous or collective deadline passed)");
        }
        spdlog::error("{} (pid {}) {}: stopping the other {} worker(s)", w->name, w->pid,
                      ended(*w), live_workers());
        notify_if_final(rank_of(*w), w->name + " " + ended(*w));
        begin_stop(SIGTERM);
      }
    }
    maybe_begin_server_grace();
  }

  // The hang guard: wakes up when the newest output of any running process is hang_timeout old.
  void arm_hang_guard(Clock::time_point when) {
    if (options_.hang_timeout.count() <= 0) return;
    const Generation generation = generation_;
    hang_timer_.expires_at(when);
    hang_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
      if (ec || generation != generation_ || stop_.begun() || server_grace_begun_) return;
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
    bool only_trainers = true;
    for (const auto& w : workers_) {
      if (w->running && w->role != env::Role::kTrainer) only_trainers = false;
    }
    std::ostringstream os;
    os << "hang guard: no output from any rank for " << seconds_text(options_.hang_timeout)
       << " s; silent: ";
    // Trainers only (every collective job): "ranks 0 (1.0 s), 1 (1.0 s)"; with servers each
    // process is named: "rank 0 (1.0 s), server 1 (1.0 s)".
    if (only_trainers) os << "rank" << (live_workers() > 1 ? "s " : " ");
    bool first = true;
    for (const auto& w : workers_) {
      if (!w->running) continue;
      os << (first ? "" : ", ") << (only_trainers ? std::to_string(w->index) : w->name) << " ("
         << elapsed_text(now - w->last_output) << " s)";
      first = false;
    }
    hang_message_ = os.str();
    enter(JobState::kHung);
    dump_stacks("hang guard: no output for " + seconds_text(options_.hang_timeout) + " s");
    spdlog::error("{}; stopping {} worker(s)", hang_message_, live_workers());
    notify_if_final(std::nullopt, hang_message_);
    begin_stop(SIGTERM);
  }

  void read_output(Worker& w) {
    const Generation generation = generation_;
    w.pipe->async_read_some(
        asio::buffer(w.buffer),
        [this, &w, generation](const boost::system::error_code& ec, std::size_t n) {
          if (generation != generation_) return;  // a closed pipe of an earlier generation
          if (n > 0) {
            w.last_output = Clock::now();
            w.output->consume(w.buffer.data(), n);
          }
          if (ec) {
            close_output(w);
            maybe_finish();
            return;
          }
          read_output(w);
        });
  }

  void close_output(Worker& w) {
    if (w.eof) return;
    w.output->finish_line();
    w.eof = true;
    boost::system::error_code ignored;
    w.pipe->close(ignored);
  }

  // Everything reaped: clean up stragglers in the groups, give the pipes a moment to drain, then
  // ask the restart policy.
  void maybe_finish() {
    if (done_ || restart_pending_ || live_workers() > 0) return;
    if (!all_reaped_) {
      all_reaped_ = true;
      hang_timer_.cancel();
      grace_timer_.cancel();
      stop_.finish();  // what is left in a process's group does not outlive the generation
      const Generation generation = generation_;
      drain_timer_.expires_after(kDrainTimeout);
      drain_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
        if (ec || generation != generation_) return;
        for (const auto& w : workers_) {
          if (!w->eof) {
            spdlog::warn(
                "{}'s output is still open after it exited (a process outside its group holds "
                "it); closing it",
                w->name);
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
    // A job of several nodes succeeds when every node's part did: until the others say so (or
    // that the generation failed there), this node waits with nothing running.
    if (options_.on_generation_success && state_ == JobState::kRunning && !job_succeeded_) {
      if (!success_told_) {
        success_told_ = true;
        spdlog::info("all {} worker(s) of this node exited with code 0; waiting for the other "
                     "nodes",
                     workers_.size());
        try {
          options_.on_generation_success(generation_);
        } catch (const std::exception& e) {
          spdlog::error("could not tell the other nodes that this node is done: {}", e.what());
        }
        on_external_event();
      }
      return;
    }
    if (options_.report) {
      options_.report->generation_ended(generation_.index(), wall_now(),
                                        state_ == JobState::kRunning ? "succeeded"
                                                                     : state_name(state_) + ": " +
                                                                           failure_what());
      write_report();
    }
    const RestartDecision d = options_.restart_policy.decide(generation_end());
    if (d.restart()) {
      // Posted, so that no handler of the ending generation is still on the stack.
      restart_pending_ = true;
      asio::post(io_, [this] { restart(); });
      return;
    }
    if (!d.vetoed_by.empty()) spdlog::warn("{}; not restarting: {}", failure_what(), d.vetoed_by);
    finish_job();
  }

  void finish_job() {
    done_ = true;
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    io_.stop();
  }

  void restart() {
    restart_pending_ = false;
    // Asked again: a signal or an external stop may have arrived since the decision.
    const RestartDecision d = options_.restart_policy.decide(generation_end());
    if (!d.restart()) {
      if (!d.vetoed_by.empty()) {
        spdlog::warn("{}; not restarting: {}", failure_what(), d.vetoed_by);
      }
      finish_job();
      return;
    }
    const Generation next = d.next;
    spdlog::error("{}; restarting the job (restart {} of {}){}", failure_what(), next.index(),
                  options_.restart_policy.max_restarts(), failure_details());
    std::vector<WorkerLaunch> launches;
    try {
      launches = make_generation_(next);
      if (launches.size() != workers_.size()) {
        throw SupervisorError("restart " + std::to_string(next.index()) + " has " +
                              std::to_string(launches.size()) + " worker(s), the job had " +
                              std::to_string(workers_.size()));
      }
      for (std::size_t i = 0; i < launches.size(); ++i) {
        const bool same_role = launches[i].role == workers_[i]->role;
        if (!same_role || (launches[i].index != workers_[i]->index && !options_.indices_may_change)) {
          throw SupervisorError("restart " + std::to_string(next.index()) + " starts " +
                                launches[i].name() + " where the job had " + workers_[i]->name);
        }
      }
    } catch (const std::exception& e) {
      spawn_error_ = "could not prepare restart " + std::to_string(next.index()) + ": " + e.what();
      spdlog::error("{}", spawn_error_);
      enter(JobState::kSpawnFailed);
      notify_failure(FailureNotice{std::nullopt, kSpawnFailedExitCode, spawn_error_});
      finish_job();
      return;
    }
    const std::string separator = "==== restart " + std::to_string(next.index()) + " ====\n";
    bool echoed = false;
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = *workers_[i];
      if (w.started) watchdog_->release(w.pid);  // reaped and its group SIGKILLed
      w.reset_generation();
      if (launches[i].index != w.index) {
        spdlog::info("restart {}: {} of this node is {} now", next.index(), w.name,
                     launches[i].name());
        w.index = launches[i].index;
        w.name = launches[i].name();
        w.output = &output_for(launches[i]);
      }
      const bool echo = w.output->echoes() && !echoed;
      w.output->start_generation(separator, echo);
      echoed = echoed || echo;
    }
    generation_ = next;
    start_generation(launches);
  }

  // What ended the current generation, e.g. "rank 1 exited with code 3".
  std::string failure_what() const {
    if (first_failure_) return first_failure_->name + " " + ended(*first_failure_);
    if (!hang_message_.empty()) return hang_message_;
    if (peer_failure_) return peer_failure_->second;
    if (external_) return external_->second;
    if (interrupt_) return "the launcher was stopped by " + signal_name(*interrupt_);
    return spawn_error_;
  }

  void write_report() {
    if (!options_.report || !options_.log_dir) return;
    try {
      options_.report->write(*options_.log_dir);
    } catch (const std::exception& e) {
      spdlog::warn("could not write the run report: {}", e.what());
    }
  }

  // Takes the stack of every thread of every running process (launcher/diagnose/) into
  // log_dir/stacks.<generation>.txt and prints, per process, where our code is.
  void dump_stacks(const std::string& reason) {
    if (!options_.dump_stacks) return;
    std::vector<StackTarget> targets;
    for (const auto& w : workers_) {
      if (w->running) targets.push_back(StackTarget{w->name, w->pid});
    }
    if (targets.empty()) return;
    const auto started = Clock::now();
    const std::vector<ProcessStacks> stacks = collect_stacks(targets, StackOptions{});
    const std::vector<std::string> summary = summarize_stacks(stacks);
    std::string where = "stderr";
    if (options_.log_dir) {
      const std::string path =
          (fs::path(*options_.log_dir) / ("stacks." + std::to_string(generation_.index()) + ".txt"))
              .string();
      try {
        write_stacks(path, reason, stacks);
        where = path;
      } catch (const std::exception& e) {
        spdlog::warn("could not write the stack dump: {}", e.what());
      }
    }
    std::string lines;
    for (const std::string& line : summary) lines += "\n    " + line;
    if (where == "stderr") {
      for (const ProcessStacks& p : stacks) lines += "\n==== " + p.name + " ====\n" + p.text;
    }
    spdlog::warn("{}: stacks of {} process(es) in {} ({} s); innermost frame of our code:{}",
                 reason, stacks.size(), where, elapsed_text(Clock::now() - started), lines);
  }

  // How a reaped process ended, with the exception it recorded in its error file, e.g.
  // "exited with code 1 (RuntimeError: boom)".
  static std::string ended(const Worker& w) {
    const std::string status = describe_status(w.status);
    return w.recorded_error ? status + " (" + *w.recorded_error + ")" : status;
  }

  static std::string log_of(const Worker& w, const std::string& without) {
    return w.output->log_path().empty() ? without : w.output->log_path();
  }

  // Where to look: "; log: ...; its last N line(s):\n    ..." for a failed process, each
  // process's log and last line for the hang guard.
  std::string failure_details() const {
    std::ostringstream os;
    if (first_failure_) {
      const Worker& w = *first_failure_;
      const auto& tail = w.output->tail();
      os << "; log: " << log_of(w, "console (no --log_dir)");
      if (tail.empty()) {
        os << "; it printed nothing";
      } else {
        os << "; its last " << tail.size() << " line(s):";
        for (const std::string& line : tail) os << "\n    " << line;
      }
      return os.str();
    }
    os << "; logs:";
    for (const auto& w : workers_) {
      const auto& tail = w->output->tail();
      os << "\n    " << w->name << " (" << log_of(*w, "console")
         << "): " << (tail.empty() ? std::string("printed nothing") : "last line: " + tail.back());
    }
    return os.str();
  }

  JobOutcome report() {
    if (!generation_.first() && !history_.empty()) {
      std::string lines;
      for (const std::string& h : history_) lines += "\n    " + h;
      spdlog::info("first failure of each generation:{}", lines);
    }
    const GenerationEnd end = generation_end();
    const RestartDecision d = options_.restart_policy.decide(end);
    JobOutcome out;
    out.restarts = generation_.index();
    out.servers_stopped = servers_stopped_;
    out.state = state_;
    out.exit_code = d.restart() ? 1 : d.exit_code;  // a restart still due cannot be carried out
    out.interrupt_signal = interrupt_;
    if (external_) out.external_stop = external_->second;
    const std::string after = generation_.first()
                                  ? std::string()
                                  : " after " + std::to_string(generation_.index()) + " restart(s)";
    const bool failed = end.failure_exit_code.has_value();
    if (first_failure_) {
      const Worker& w = *first_failure_;
      out.failed_rank = rank_of(w);
      out.failed_process = w.name;
      // launch's own code 2 means a bad command line: say when a worker's 2 is passed on.
      const std::string passed_on = out.exit_code == kExitUsage
                                        ? " (" + w.name + "'s own exit code, passed on)"
                                        : std::string();
      spdlog::error("job failed{}: {} (pid {}) {}; launcher exit code {}{}{}", after, w.name,
                    w.pid, ended(w), out.exit_code, passed_on, failure_details());
    } else if (!hang_message_.empty()) {
      spdlog::error("job failed{}: {}; launcher exit code {}{}", after, hang_message_,
                    out.exit_code, failure_details());
    } else if (peer_failure_ && !external_ && !interrupt_) {
      spdlog::error("job failed{}: {}; launcher exit code {}", after, peer_failure_->second,
                    out.exit_code);
    } else if (interrupt_) {
      spdlog::warn("stopped by {}: all {} worker(s) ended; exit code {}", signal_name(*interrupt_),
                   workers_.size(), out.exit_code);
    } else if (!spawn_error_.empty()) {
      spdlog::error("job failed: {}", spawn_error_);
    } else if (external_) {
      spdlog::error("job failed: {}; launcher exit code {}", external_->second, out.exit_code);
    }
    if (out.exit_code != 0) {
      std::optional<int> rank;
      if (first_failure_) rank = rank_of(*first_failure_);
      FailureNotice notice{rank, out.exit_code,
                           failed ? failure_what()
                           : interrupt_ ? "the launcher was stopped by " + signal_name(*interrupt_)
                                        : spawn_error_};
      notice.from_peer = failed && !first_failure_ && hang_message_.empty() && peer_failure_ &&
                         !external_ && !interrupt_;
      notify_failure(notice);
    } else if (servers_stopped_ > 0) {
      spdlog::info("job succeeded{}: every trainer exited with code 0; {} server(s) were stopped "
                   "after them",
                   after, servers_stopped_);
    } else {
      spdlog::info("all {} worker(s) exited with code 0{}", workers_.size(), after);
    }
    return out;
  }

  // Called last by run(): the report's end and the summary are in place.
  void finish_report(const JobOutcome& out) {
    if (!options_.report) return;
    options_.report->job_ended(wall_now(), out.exit_code,
                               out.exit_code == 0 ? "succeeded" : failure_what());
    write_report();
  }

  const SupervisorOptions& options_;
  const GenerationFactory& make_generation_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;
  asio::steady_timer hang_timer_;
  asio::steady_timer grace_timer_;  // servers after the trainers
  GroupStop stop_;
  Console console_;
  std::map<std::string, std::unique_ptr<ProcessOutput>> outputs_;  // by log file name
  std::vector<std::unique_ptr<Worker>> workers_;
  Watchdog* watchdog_ = nullptr;  // lives on run()'s stack

  // Handlers capture the generation they were armed in and do nothing in a later one.
  Generation generation_;
  JobState state_ = JobState::kRunning;  // of the current generation
  bool all_reaped_ = false;
  bool done_ = false;
  bool restart_pending_ = false;  // restart() is posted
  // What the state's causes were, for the messages and the policy.
  const Worker* first_failure_ = nullptr;  // of the current generation
  std::string hang_message_;               // set when the hang guard failed the generation
  std::optional<int> interrupt_;
  std::string spawn_error_;
  std::optional<std::pair<int, std::string>> external_;  // exit code and reason of a stop request
  bool failure_notified_ = false;
  bool server_grace_begun_ = false;  // every trainer exited 0; the servers' grace runs
  // A job of several nodes: this generation's failure on another node (exit code, what), and
  // whether every node's part of it succeeded / this node said its part did.
  std::optional<std::pair<int, std::string>> peer_failure_;
  bool job_succeeded_ = false;
  bool success_told_ = false;
  std::vector<std::string> history_;  // "generation K: <its first failure>"
  int servers_stopped_ = 0;          // servers stopped when the grace ran out
};

}  // namespace

std::string process_name(env::Role role, int index) {
  return (role == env::Role::kServer ? "server " : "rank ") + std::to_string(index);
}

std::string log_file_name(env::Role role, int index) {
  return (role == env::Role::kServer ? "serverlog." : "workerlog.") + std::to_string(index);
}

JobOutcome supervise(const GenerationFactory& make_generation, const SupervisorOptions& options) {
  Supervisor supervisor(options, make_generation);
  return supervisor.run();
}

JobOutcome supervise(const std::vector<WorkerLaunch>& workers, const SupervisorOptions& options) {
  return supervise(GenerationFactory([&workers](Generation) { return workers; }), options);
}

}  // namespace ddl::launcher
