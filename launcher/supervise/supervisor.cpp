// The agent loop of this node: one generation at a time, started through a WorkerGroup
// (worker_group.h, the processes themselves), watched by the hang guard and the servers' stop,
// told about signals and the other nodes' news, and ended by asking the restart policy.
#include "launcher/supervise/supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cctype>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "launcher/diagnose/stacks.h"
#include "launcher/report/run_report.h"
#include "launcher/supervise/exit_status.h"
#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
using Process = WorkerGroup::Process;

WallClock::time_point wall_now() { return WallClock::now(); }

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

// "ranks 0..3" for trainers, "servers 0..1" for servers, "heter workers 0..2".
std::string index_range(env::Role role, int first, int last) {
  const std::string noun = role == env::Role::kServer         ? "servers "
                           : role == env::Role::kHeterTrainer ? "heter workers "
                                                              : "ranks ";
  return noun + std::to_string(first) + ".." + std::to_string(last);
}

// "(ranks 0..3)", "(servers 0..1, ranks 0..1)": the indices of each role, in launch order.
std::string describe_indices(const std::vector<Worker>& workers) {
  std::string out;
  std::size_t i = 0;
  while (i < workers.size()) {
    std::size_t j = i;
    while (j + 1 < workers.size() && workers[j + 1].role == workers[i].role) ++j;
    out += (out.empty() ? "" : ", ") +
           index_range(workers[i].role, workers[i].index, workers[j].index);
    i = j + 1;
  }
  return "(" + out + ")";
}

std::optional<int> rank_of(const Process& p) {
  if (p.role == env::Role::kTrainer) return p.index;
  return std::nullopt;
}

bool exited_zero(const Process& p) {
  return p.started && !p.running && WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0;
}

// How a reaped process ended, with the exception it recorded in its error file, e.g.
// "exited with code 1 (RuntimeError: boom)".
std::string ended(const Process& p) {
  const std::string status = describe_status(p.status);
  return p.recorded_error ? status + " (" + *p.recorded_error + ")" : status;
}

// Whether a line reads like a failure report ("checkpoint failed: Too many open files",
// "RuntimeError: ..."), as opposed to progress output.
bool reports_error(const std::string& line) {
  std::string lower(line.size(), ' ');
  std::transform(line.begin(), line.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"error", "fail", "exception", "abort", "fatal"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string log_of(const Process& p, const std::string& without) {
  return p.output->log_path().empty() ? without : p.output->log_path();
}

// Where the current generation is. Together with JobState (what went wrong, for the restart
// policy) and the WorkerGroup's stop sequence, this is all the loop's state.
enum class Phase {
  kRunning,          // processes run (some may have exited 0)
  kServerGrace,      // every trainer exited 0; the servers' grace runs
  kDraining,         // every process is reaped; waiting for their pipes to reach EOF
  kWaitingForPeers,  // multi-node: this node's part succeeded, the others' is not known yet
  kRestarting,       // the next generation is about to start (restart() is posted)
  kDone,             // the job is over; io_context stops
};

class Supervisor {
 public:
  Supervisor(const SupervisorOptions& options, const GenerationFactory& make_generation)
      : options_(options),
        make_generation_(make_generation),
        signals_(io_, SIGCHLD, SIGINT, SIGTERM),
        hang_timer_(io_),
        grace_timer_(io_),
        console_(STDOUT_FILENO),
        group_(
            io_, options.kill_timeout,
            WorkerGroup::Events{[this](Process& p) { on_exited(p); }, [this] { maybe_finish(); }}),
        generation_(options.first_generation) {
    signals_.add(SIGHUP);
    signals_.add(SIGQUIT);  // torchrun forwards it too
    signals_.add(SIGUSR1);
  }

  JobOutcome run() {
    const std::vector<Worker> workers = make_generation_(generation_);
    open_outputs(workers);
    wait_for_signal();
    if (options_.external_stop) {
      options_.external_stop->set_waker(
          [this] { asio::post(io_, [this] { on_external_event(); }); });
    }
    start_generation(workers);
    io_.run();
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
    JobOutcome out = report();
    finish_report(out);
    return out;
  }

  ~Supervisor() {
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
  }

 private:
  void open_outputs(const std::vector<Worker>& workers) {
    if (options_.log_dir) {
      std::error_code ec;
      fs::create_directories(*options_.log_dir, ec);
      if (ec || !fs::is_directory(*options_.log_dir)) {
        throw SupervisorError("cannot create --log_dir '" + *options_.log_dir + "': " +
                              (ec ? ec.message() : std::string("exists and is not a directory")));
      }
    }
    std::set<std::pair<env::Role, int>> seen;
    for (const Worker& w : workers) {
      if (!seen.emplace(w.role, w.index).second) {
        throw SupervisorError("two processes of the job are both " + w.name());
      }
      group_.add(w, output_for(w));
    }
  }

  // The output of the worker named by `w`'s role and index, opened on first use: a log file
  // keeps its name for the whole job, even when an elastic restart gives it to another process.
  ProcessOutput& output_for(const Worker& w) {
    auto& slot = outputs_[w.log_name()];
    if (slot) return *slot;
    const std::string prefix = "[" + w.name() + "] ";
    if (options_.log_dir) {
      const bool echo =
          w.echo.value_or(w.role == env::Role::kTrainer && w.index == 0) && !options_.quiet;
      slot = std::make_unique<ProcessOutput>(
          w.name(), (fs::path(*options_.log_dir) / w.log_name()).string(), echo,
          w.prefix_echo ? prefix : "", console_, options_.append_logs);
    } else {
      slot = std::make_unique<ProcessOutput>(w.name(), "", w.echo.value_or(true), prefix, console_);
    }
    if (options_.report) {
      const std::string name = w.name();
      RunReport* report = options_.report;
      slot->on_line([report, name](const std::string& line) { report->process_line(name, line); });
    }
    return *slot;
  }

  // Starts every process of the current generation and arms the hang guard.
  void start_generation(const std::vector<Worker>& workers) {
    group_.begin_generation();
    phase_ = Phase::kRunning;
    state_ = JobState::kRunning;
    first_failure_ = nullptr;
    reaped_first_ = nullptr;
    hang_message_.clear();
    grace_timer_.cancel();
    servers_stopped_ = 0;
    heter_stopped_ = 0;
    paddle_stop_ = false;
    peer_failure_.reset();
    if (options_.report) {
      int world_size = 0;
      for (const Worker& w : workers) {
        if (w.role != env::Role::kTrainer) continue;
        if (auto v = env::lookup(w.env, env::kWorldSize)) world_size = std::atoi(v->c_str());
        break;
      }
      options_.report->generation_started(generation_.index(), wall_now(), world_size);
    }
    if (!workers.empty()) {
      spdlog::info("{}starting {} worker(s) {}: {}",
                   generation_.first()
                       ? std::string()
                       : "restart " + std::to_string(generation_.index()) + " of " +
                             std::to_string(options_.restart_policy.max_restarts()) + ": ",
                   workers.size(), describe_indices(workers), workers.front().executable);
    }
    for (std::size_t i = 0; i < workers.size() && !group_.stopping(); ++i) start(i, workers[i]);
    reap();  // a process may already be gone
    if (!group_.stopping()) arm_hang_guard(Clock::now() + options_.hang_timeout);
    // News about this generation may have come while it was being started.
    on_external_event();
    maybe_finish();
  }

  void start(std::size_t i, const Worker& w) {
    std::string error;
    if (!group_.start(i, w, error)) {
      spawn_failed(*group_.processes()[i], error);
      return;
    }
    if (options_.report) {
      const Process& p = *group_.processes()[i];
      options_.report->process_started(p.name, p.role != env::Role::kTrainer, p.index,
                                       generation_.index(), p.pid, wall_now());
    }
  }

  // Moves the job to `next` unless the current state outranks it.
  void enter(JobState next) {
    if (overrides(next, state_)) state_ = next;
  }

  GenerationEnd generation_end() const {
    GenerationEnd end;
    end.generation = generation_;
    end.state = state_;
    if (first_failure_) {
      // A cause the stop killed (named by first_cause()) keeps the exit code of the failure that
      // was reaped first, not the stop's own signal.
      const Process* coded =
          WIFEXITED(first_failure_->status) || !reaped_first_ ? first_failure_ : reaped_first_;
      end.failure_exit_code = exit_code_of(coded->status);
    }
    if (!hang_message_.empty()) end.failure_exit_code = kExitDeadline;
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

  void spawn_failed(const Process& p, const std::string& why) {
    spawn_error_ = "could not start " + p.name + ": " + why;
    spdlog::error("{}", spawn_error_);
    enter(JobState::kSpawnFailed);
    notify_failure(FailureNotice{rank_of(p), kExitError, spawn_error_});
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

  // News from the other nodes: the job is over, or this generation failed there. (That every
  // node's part of it succeeded is read by maybe_finish().)
  void on_external_event() {
    if (phase_ == Phase::kDone || !options_.external_stop) return;
    on_external_stop();
    if (external_ || phase_ == Phase::kRestarting) return;
    if (auto failure = options_.external_stop->generation_failure(generation_)) {
      if (!peer_failure_ && state_ == JobState::kRunning) {
        peer_failure_ = failure;
        history_.push_back(failure->second);  // "generation K failed on node N: ..."
        enter(JobState::kPeerFailed);
        if (!group_.stopping() && group_.running() > 0) {
          spdlog::error("{}: stopping {} worker(s)", failure->second, group_.running());
          begin_stop(SIGTERM);
        }
      }
    }
    maybe_finish();
  }

  // Another thread asked the job to stop (another node failed for good).
  void on_external_stop() {
    if (phase_ == Phase::kDone || external_) return;
    auto request = options_.external_stop->requested();
    if (!request) return;
    external_ = request;
    enter(JobState::kStoppedExternally);
    if (!group_.stopping() && group_.running() > 0) {
      spdlog::error("{}: stopping {} worker(s)", request->second, group_.running());
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
      if (phase_ != Phase::kDone) wait_for_signal();
      maybe_finish();
    });
  }

  // Any of these signals ends the job: no restart follows, whatever state the job is in.
  void on_interrupt(int signo) {
    if (!group_.stopping()) {
      interrupt_ = signo;
      enter(JobState::kInterrupted);
      spdlog::warn("received {}: forwarding it to {} worker(s); send it again to kill them at once",
                   signal_name(signo), group_.running());
      notify_failure(FailureNotice{std::nullopt, 128 + signo,
                                   "the launcher was stopped by " + signal_name(signo)});
      begin_stop(signo);
      return;
    }
    // Told again, or told while stopping after a failure: no more patience.
    if (!interrupt_) interrupt_ = signo;
    enter(JobState::kInterrupted);
    if (group_.running() > 0) {
      spdlog::warn("received {} while stopping: killing {} worker(s) now", signal_name(signo),
                   group_.running());
      group_.kill_now();
    }
  }

  void begin_stop(int signo) {
    hang_timer_.cancel();
    grace_timer_.cancel();
    group_.stop(signo);
  }

  // Servers after the trainers (see supervisor.h): once every trainer exited 0, the servers and
  // heter workers still running are stopped, at once (Paddle's rule) or after server_grace.
  void maybe_begin_server_grace() {
    if (phase_ != Phase::kRunning || group_.stopping()) return;
    int trainers = 0;
    int others_running = 0;
    for (const auto& p : group_.processes()) {
      if (p->role == env::Role::kTrainer) {
        if (!exited_zero(*p)) return;
        ++trainers;
      } else {
        others_running += p->running;
      }
    }
    if (trainers == 0 || others_running == 0) return;
    phase_ = Phase::kServerGrace;
    hang_timer_.cancel();  // the grace bounds the wait from here on
    if (!options_.server_grace) {
      stop_servers(std::nullopt);
      return;
    }
    const std::chrono::milliseconds grace = *options_.server_grace;
    spdlog::debug("all {} trainer(s) exited with code 0; {} server(s) have {} s to exit", trainers,
                  others_running, seconds_text(grace));
    const Generation generation = generation_;
    grace_timer_.expires_after(grace);
    grace_timer_.async_wait([this, generation, trainers](const boost::system::error_code& ec) {
      if (ec || generation != generation_ || group_.stopping()) return;
      stop_servers(trainers);
    });
  }

  // Stops the servers and heter workers still running after the trainers: with Paddle's line
  // (`trainers` unset: no grace) or ours (after the grace; `trainers` exited 0).
  void stop_servers(std::optional<int> trainers) {
    servers_stopped_ = 0;
    heter_stopped_ = 0;
    for (const auto& p : group_.processes()) {
      if (!p->running) continue;
      ++(p->role == env::Role::kHeterTrainer ? heter_stopped_ : servers_stopped_);
    }
    if (servers_stopped_ + heter_stopped_ == 0) return;
    if (trainers) {
      spdlog::info(
          "all {} trainer(s) exited with code 0 and {} server(s) are still running {} s later "
          "(--server_grace): stopping them (SIGTERM, SIGKILL after {} s); the job succeeds",
          *trainers, servers_stopped_ + heter_stopped_, seconds_text(*options_.server_grace),
          seconds_text(options_.kill_timeout));
    } else {
      // Paddle's words (1.8's launch_ps; the fleet launcher's when there are heter workers), on
      // stderr where Paddle's tests look for them.
      spdlog::info("{}",
                   heter_stopped_ > 0
                       ? "all workers exit, going to finish parameter server and heter_worker."
                       : "all workers exit, going to finish parameter server");
    }
    paddle_stop_ = !trainers;
    group_.stop(SIGTERM);
  }

  void reap() {
    group_.reap();
    maybe_begin_server_grace();
  }

  // A process of this generation was reaped (WorkerGroup::Events::exited).
  void on_exited(Process& p) {
    if (options_.report) {
      ProcessUsage usage;
      usage.cpu_seconds =
          static_cast<double>(p.usage.ru_utime.tv_sec + p.usage.ru_stime.tv_sec) +
          static_cast<double>(p.usage.ru_utime.tv_usec + p.usage.ru_stime.tv_usec) / 1e6;
      usage.peak_rss_kib = p.usage.ru_maxrss;
      options_.report->process_exited(p.name, generation_.index(), p.status, usage, wall_now());
    }
    const bool failed = !(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0);
    if (!failed || group_.stopping() || state_ != JobState::kRunning) return;
    first_failure_ = &p;
    enter(JobState::kWorkerFailed);
    // A rank that gave up at a deadline waited for a peer: the stuck one is still running.
    if (WIFEXITED(p.status) && WEXITSTATUS(p.status) == kExitDeadline && group_.running() > 0) {
      dump_stacks(p.name + " exited with code " + std::to_string(kExitDeadline) +
                  " (a rendezvous or collective deadline passed)");
    }
    spdlog::error("{} (pid {}) {}: stopping the other {} worker(s)", p.name, p.pid, ended(p),
                  group_.running());
    notify_if_final(rank_of(p), p.name + " " + ended(p));
    begin_stop(SIGTERM);
  }

  // The hang guard: wakes up when the newest output of any running process is hang_timeout old.
  void arm_hang_guard(Clock::time_point when) {
    if (options_.hang_timeout.count() <= 0) return;
    const Generation generation = generation_;
    hang_timer_.expires_at(when);
    hang_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
      if (ec || generation != generation_ || group_.stopping() || phase_ != Phase::kRunning) {
        return;
      }
      check_hang();
    });
  }

  void check_hang() {
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> newest;
    for (const auto& p : group_.processes()) {
      if (p->running && (!newest || p->last_output > *newest)) newest = p->last_output;
    }
    if (!newest) return;  // everyone has exited; maybe_finish() takes it from here
    if (now - *newest < options_.hang_timeout) {
      arm_hang_guard(*newest + options_.hang_timeout);
      return;
    }
    hang_message_ = describe_hang(now);
    enter(JobState::kHung);
    dump_stacks("hang guard: no output for " + seconds_text(options_.hang_timeout) + " s");
    spdlog::error("{}; stopping {} worker(s)", hang_message_, group_.running());
    notify_if_final(std::nullopt, hang_message_);
    begin_stop(SIGTERM);
  }

  // "hang guard: no output from any rank for 1 s; silent: ranks 0 (1.0 s), 1 (1.0 s)" for
  // trainers only (every collective job); with servers each process is named: "rank 0 (1.0 s),
  // server 1 (1.0 s)".
  std::string describe_hang(Clock::time_point now) const {
    bool only_trainers = true;
    for (const auto& p : group_.processes()) {
      if (p->running && p->role != env::Role::kTrainer) only_trainers = false;
    }
    std::ostringstream os;
    os << "hang guard: no output from any rank for " << seconds_text(options_.hang_timeout)
       << " s; silent: ";
    if (only_trainers) os << "rank" << (group_.running() > 1 ? "s " : " ");
    bool first = true;
    for (const auto& p : group_.processes()) {
      if (!p->running) continue;
      os << (first ? "" : ", ") << (only_trainers ? std::to_string(p->index) : p->name) << " ("
         << elapsed_text(now - p->last_output) << " s)";
      first = false;
    }
    return os.str();
  }

  // Every process reaped: clean up stragglers in the groups, give the pipes a moment to drain,
  // wait for the other nodes when this node's part succeeded, then ask the restart policy.
  void maybe_finish() {
    if (phase_ == Phase::kDone || phase_ == Phase::kRestarting || group_.running() > 0) return;
    if (phase_ == Phase::kRunning || phase_ == Phase::kServerGrace) {
      phase_ = Phase::kDraining;
      hang_timer_.cancel();
      grace_timer_.cancel();
      group_.finish();
    }
    if (!group_.output_closed()) return;
    // A job of several nodes succeeds when every node's part did: until the others say so (or
    // that the generation failed there), this node waits with nothing running.
    if (options_.on_generation_success && state_ == JobState::kRunning && !peers_succeeded()) {
      if (phase_ != Phase::kWaitingForPeers) {
        phase_ = Phase::kWaitingForPeers;
        spdlog::info(
            "all {} worker(s) of this node exited with code 0; waiting for the other "
            "nodes",
            group_.size());
        try {
          options_.on_generation_success(generation_);
        } catch (const std::exception& e) {
          spdlog::error("could not tell the other nodes that this node is done: {}", e.what());
        }
        on_external_event();
      }
      return;
    }
    end_generation();
  }

  // Every node's processes of this generation exited 0 (multi-node).
  bool peers_succeeded() const {
    return options_.external_stop && !options_.external_stop->generation_failure(generation_) &&
           options_.external_stop->succeeded(generation_);
  }

  // The generation is over here: record it, then restart or end the job as the policy says.
  void end_generation() {
    if (options_.report) {
      options_.report->generation_ended(
          generation_.index(), wall_now(),
          state_ == JobState::kRunning ? "succeeded" : state_name(state_) + ": " + failure_what());
      write_report();
    }
    const RestartDecision d = options_.restart_policy.decide(generation_end());
    if (d.restart()) {
      // Posted, so that no handler of the ending generation is still on the stack.
      phase_ = Phase::kRestarting;
      asio::post(io_, [this] { restart(); });
      return;
    }
    if (!d.vetoed_by.empty()) spdlog::warn("{}; not restarting: {}", failure_what(), d.vetoed_by);
    finish_job();
  }

  void finish_job() {
    phase_ = Phase::kDone;
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    io_.stop();
  }

  void restart() {
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
    std::vector<Worker> workers;
    try {
      workers = make_generation_(next);
      check_restart(next, workers);
    } catch (const std::exception& e) {
      spawn_error_ = "could not prepare restart " + std::to_string(next.index()) + ": " + e.what();
      spdlog::error("{}", spawn_error_);
      enter(JobState::kSpawnFailed);
      notify_failure(FailureNotice{std::nullopt, kExitError, spawn_error_});
      finish_job();
      return;
    }
    const std::string separator = "==== restart " + std::to_string(next.index()) + " ====\n";
    bool echoed = false;
    for (std::size_t i = 0; i < group_.size(); ++i) {
      const Process& p = *group_.processes()[i];
      if (workers[i].index != p.index) {
        spdlog::info("restart {}: {} of this node is {} now", next.index(), p.name,
                     workers[i].name());
        group_.rename(i, workers[i], output_for(workers[i]));
      }
      const bool echo = p.output->echoes() && !echoed;
      p.output->start_generation(separator, echo);
      echoed = echoed || echo;
    }
    generation_ = next;
    start_generation(workers);
  }

  // Throws SupervisorError unless `workers` are the job's, in its order (their indices may
  // differ when options_.indices_may_change).
  void check_restart(Generation next, const std::vector<Worker>& workers) const {
    const auto& processes = group_.processes();
    if (workers.size() != processes.size()) {
      throw SupervisorError("restart " + std::to_string(next.index()) + " has " +
                            std::to_string(workers.size()) + " worker(s), the job had " +
                            std::to_string(processes.size()));
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
      const bool same_role = workers[i].role == processes[i]->role;
      if (!same_role || (workers[i].index != processes[i]->index && !options_.indices_may_change)) {
        throw SupervisorError("restart " + std::to_string(next.index()) + " starts " +
                              workers[i].name() + " where the job had " + processes[i]->name);
      }
    }
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

  // Where the report and the stack dumps go: report_dir, else the log dir (unset without one).
  std::optional<std::string> report_dir() const {
    return options_.report_dir ? options_.report_dir : options_.log_dir;
  }

  void write_report() {
    const auto dir = report_dir();
    if (!options_.report || !dir) return;
    try {
      fs::create_directories(*dir);
      options_.report->write(*dir);
    } catch (const std::exception& e) {
      spdlog::warn("could not write the run report: {}", e.what());
    }
  }

  // Takes the stack of every thread of every running process (launcher/diagnose/) into
  // log_dir/stacks.<generation>.txt and prints, per process, where our code is.
  void dump_stacks(const std::string& reason) {
    if (!options_.dump_stacks) return;
    std::vector<StackTarget> targets;
    for (const auto& p : group_.processes()) {
      if (p->running) targets.push_back(StackTarget{p->name, p->pid});
    }
    if (targets.empty()) return;
    const auto started = Clock::now();
    const std::vector<ProcessStacks> stacks = collect_stacks(targets, StackOptions{});
    const std::vector<std::string> summary = summarize_stacks(stacks);
    std::string where = "stderr";
    if (const auto dir = report_dir()) {
      const std::string path =
          (fs::path(*dir) / ("stacks." + std::to_string(generation_.index()) + ".txt")).string();
      try {
        fs::create_directories(*dir);
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

  // Where to look: "; log: ...; its last N line(s):\n    ..." for a failed process, each
  // process's log and last line for the hang guard.
  std::string failure_details() const {
    std::ostringstream os;
    if (first_failure_) {
      const Process& p = *first_failure_;
      const auto& tail = p.output->tail();
      os << "; log: " << log_of(p, "console (no --log_dir)");
      if (tail.empty()) {
        os << "; it printed nothing";
      } else {
        os << "; its last " << tail.size() << " line(s):";
        for (const std::string& line : tail) os << "\n    " << line;
      }
      return os.str();
    }
    os << "; logs:";
    for (const auto& p : group_.processes()) {
      const auto& tail = p->output->tail();
      os << "\n    " << p->name << " (" << log_of(*p, "console")
         << "): " << (tail.empty() ? std::string("printed nothing") : "last line: " + tail.back());
    }
    return os.str();
  }

  // The failure that happened first, by time: the process reaped first may only be an echo (a
  // rank that saw its peer's connection close exits at once, while the peer that failed first is
  // still tearing down, and may then die of the stop's SIGTERM). A process's failure time is when
  // it last wrote output; besides the first reaped failure, candidates are processes that exited
  // non-zero by themselves and processes whose last line reports an error, within kEchoWindow
  // before the first reaped failure's own last line. When the first reaped failure is a deadline
  // exit (124: a rank gave up on a stuck peer), it stands: the stack dump names the stuck rank,
  // which the stop then kills.
  const Process* first_cause() const {
    if (!first_failure_) return nullptr;
    if (WIFEXITED(first_failure_->status) && WEXITSTATUS(first_failure_->status) == kExitDeadline) {
      return first_failure_;
    }
    constexpr auto kEchoWindow = std::chrono::seconds(30);
    const Process* cause = first_failure_;
    for (const auto& p : group_.processes()) {
      if (p.get() == first_failure_ || p->running || !p->started) continue;
      const bool exited_failing = WIFEXITED(p->status) && WEXITSTATUS(p->status) != 0;
      const auto& tail = p->output->tail();
      if (!exited_failing && (tail.empty() || !reports_error(tail.back()))) continue;
      if (p->last_output + kEchoWindow < first_failure_->last_output) continue;
      if (p->last_output < cause->last_output) cause = p.get();
    }
    return cause;
  }

  JobOutcome report() {
    if (const Process* cause = first_cause(); cause && cause != first_failure_) {
      spdlog::info(
          "{} exited first ({}), but {} failed before it (its last line came {} s earlier): "
          "naming {} as the cause",
          first_failure_->name, ended(*first_failure_), cause->name,
          elapsed_text(first_failure_->last_output - cause->last_output), cause->name);
      reaped_first_ = first_failure_;
      first_failure_ = cause;
    }
    if (!generation_.first() && !history_.empty()) {
      std::string lines;
      for (const std::string& h : history_) lines += "\n    " + h;
      spdlog::info("first failure of each generation:{}", lines);
    }
    const GenerationEnd end = generation_end();
    const RestartDecision d = options_.restart_policy.decide(end);
    JobOutcome out;
    out.restarts = generation_.index();
    out.servers_stopped = servers_stopped_ + heter_stopped_;
    out.state = state_;
    out.exit_code = d.restart() ? 1 : d.exit_code;  // a restart still due cannot be carried out
    out.interrupt_signal = interrupt_;
    if (external_) out.external_stop = external_->second;
    const std::string after = generation_.first()
                                  ? std::string()
                                  : " after " + std::to_string(generation_.index()) + " restart(s)";
    const bool failed = end.failure_exit_code.has_value();
    if (first_failure_) {
      const Process& p = *first_failure_;
      out.failed_rank = rank_of(p);
      out.failed_process = p.name;
      // launch's own code 2 means a bad command line: say when a worker's 2 is passed on.
      const std::string passed_on = out.exit_code == kExitUsage
                                        ? " (" + p.name + "'s own exit code, passed on)"
                                        : std::string();
      spdlog::error("job failed{}: {} (pid {}) {}; launcher exit code {}{}{}", after, p.name, p.pid,
                    ended(p), out.exit_code, passed_on, failure_details());
    } else if (!hang_message_.empty()) {
      spdlog::error("job failed{}: {}; launcher exit code {}{}", after, hang_message_,
                    out.exit_code, failure_details());
    } else if (peer_failure_ && !external_ && !interrupt_) {
      spdlog::error("job failed{}: {}; launcher exit code {}", after, peer_failure_->second,
                    out.exit_code);
    } else if (interrupt_) {
      spdlog::warn("stopped by {}: all {} worker(s) ended; exit code {}", signal_name(*interrupt_),
                   group_.size(), out.exit_code);
    } else if (!spawn_error_.empty()) {
      spdlog::error("job failed: {}", spawn_error_);
    } else if (external_) {
      spdlog::error("job failed: {}; launcher exit code {}", external_->second, out.exit_code);
    }
    if (out.exit_code != 0) {
      std::optional<int> rank;
      if (first_failure_) rank = rank_of(*first_failure_);
      FailureNotice notice{rank, out.exit_code,
                           failed       ? failure_what()
                           : interrupt_ ? "the launcher was stopped by " + signal_name(*interrupt_)
                                        : spawn_error_};
      notice.from_peer = failed && !first_failure_ && hang_message_.empty() && peer_failure_ &&
                         !external_ && !interrupt_;
      notify_failure(notice);
    } else if (servers_stopped_ + heter_stopped_ > 0) {
      if (paddle_stop_ && heter_stopped_ > 0) spdlog::info("all heter_worker are killed");
      if (paddle_stop_ && servers_stopped_ > 0) spdlog::info("all parameter server are killed");
      spdlog::info(
          "job succeeded{}: every trainer exited with code 0; {} server(s) were stopped "
          "after them",
          after, servers_stopped_ + heter_stopped_);
    } else {
      spdlog::info("all {} worker(s) exited with code 0{}", group_.size(), after);
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
  asio::steady_timer hang_timer_;
  asio::steady_timer grace_timer_;  // servers after the trainers
  Console console_;
  std::map<std::string, std::unique_ptr<ProcessOutput>> outputs_;  // by log file name
  WorkerGroup group_;

  // Handlers capture the generation they were armed in and do nothing in a later one.
  Generation generation_;
  Phase phase_ = Phase::kRunning;
  JobState state_ = JobState::kRunning;  // of the current generation
  // What the state's causes were, for the messages and the policy.
  const Process* first_failure_ = nullptr;  // of the current generation
  // The failure reaped first, when first_cause() named an earlier one instead (its exit code
  // stands for a cause the stop killed).
  const Process* reaped_first_ = nullptr;
  std::string hang_message_;  // set when the hang guard failed the generation
  std::optional<int> interrupt_;
  std::string spawn_error_;
  std::optional<std::pair<int, std::string>> external_;  // exit code and reason of a stop request
  // A job of several nodes: this generation's failure on another node (exit code, what).
  std::optional<std::pair<int, std::string>> peer_failure_;
  bool failure_notified_ = false;     // options_.on_failure was called
  std::vector<std::string> history_;  // "generation K: <its first failure>"
  int servers_stopped_ = 0;           // servers stopped after the trainers
  int heter_stopped_ = 0;             // heter workers stopped after the trainers
  bool paddle_stop_ = false;          // stopped at once, with Paddle's lines (no --server_grace)
};

}  // namespace

JobOutcome supervise(const GenerationFactory& make_generation, const SupervisorOptions& options) {
  Supervisor supervisor(options, make_generation);
  return supervisor.run();
}

JobOutcome supervise(const std::vector<Worker>& workers, const SupervisorOptions& options) {
  return supervise(GenerationFactory([&workers](Generation) { return workers; }), options);
}

}  // namespace ddl::launcher
