// The agent loop of this node: one generation at a time, started through a WorkerGroup
// (worker_group.h, the processes themselves), watched by the hang guard and the servers' rule
// (roles.h), told about signals and the other nodes' news, and ended by asking the restart
// policy. How the generation stands is one Outcome (outcome.h); the run report and the stack
// dumps watch it as observers (observers.h).
#include "launcher/supervise/supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <set>
#include <utility>

#include "launcher/supervise/describe.h"
#include "launcher/supervise/exit_status.h"
#include "launcher/supervise/hang_guard.h"
#include "launcher/supervise/observers.h"
#include "launcher/supervise/pace_guard.h"
#include "launcher/supervise/report_observer.h"
#include "launcher/supervise/roles.h"
#include "launcher/supervise/stack_dump_observer.h"
#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

namespace asio = boost::asio;

namespace {

using Process = WorkerGroup::Process;
using Stage = Outcome::Stage;

class Supervisor {
 public:
  Supervisor(const SupervisorOptions& options, const GenerationFactory& make_generation)
      : options_(options),
        make_generation_(make_generation),
        signals_(io_, SIGCHLD, SIGINT, SIGTERM),
        grace_timer_(io_),
        outputs_(JobOutputs::Options{options.log_dir, options.append_logs, options.quiet,
                                     options.stdout_filters, options.stderr_filters},
                 STDOUT_FILENO,
                 [this](const std::string& name, const std::string& line) {
                   for (auto& o : observers_) o->process_line(name, line);
                 }),
        pace_guard_(io_, options.pace, options.node_label, observers_, options.on_node_pace,
                    options.node_verdicts),
        group_(io_, options.kill_timeout,
               WorkerGroup::Events{[this](Process& p) { on_exited(p); }, [this] { maybe_finish(); },
                                   [this](Process& p, const std::string& line) {
                                     pace_guard_.on_line(p.slot, line);
                                   }}),
        hang_guard_(io_, options.hang_timeout, group_),
        servers_(options.server_grace, options.kill_timeout),
        generation_(options.first_generation) {
    signals_.add(SIGHUP);
    signals_.add(SIGQUIT);  // torchrun forwards it too
    signals_.add(SIGUSR1);
    // Where the report and the stack dumps go: report_dir, else the log dir (unset without one).
    const auto dir = options.report_dir ? options.report_dir : options.log_dir;
    if (options.report) {
      observers_.push_back(std::make_unique<ReportObserver>(*options.report, dir));
    }
    if (options.dump_stacks) {
      observers_.push_back(std::make_unique<StackDumpObserver>(dir, options.hang_timeout));
    }
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
    JobOutcome out = finish();
    for (auto& o : observers_) o->job_ended(out.exit_code, outcome_);
    return out;
  }

  ~Supervisor() {
    if (options_.external_stop) options_.external_stop->set_waker(nullptr);
  }

 private:
  void open_outputs(const std::vector<Worker>& workers) {
    outputs_.create_log_dir();
    std::set<std::pair<env::Role, int>> seen;
    for (const Worker& w : workers) {
      if (!seen.emplace(w.role, w.index).second) {
        throw SupervisorError("two processes of the job are both " + w.name());
      }
      group_.add(w, outputs_.of(w));
    }
  }

  // Starts every process of the current generation and arms the hang guard.
  void start_generation(const std::vector<Worker>& workers) {
    group_.begin_generation();
    outcome_.next_generation();
    grace_timer_.cancel();
    servers_.reset();
    for (auto& o : observers_) o->generation_started(generation_, workers);
    if (!workers.empty()) {
      spdlog::info("{}",
                   starting_line(generation_, options_.restart_policy.max_restarts(), workers));
    }
    arm_pace_guard();
    for (std::size_t i = 0; i < workers.size() && !group_.stopping(); ++i) start(i, workers[i]);
    reap();  // a process may already be gone
    if (!group_.stopping())
      hang_guard_.arm(watching(), [this](const std::string& m) { on_hang(m); });
    // News about this generation may have come while it was being started.
    on_external_event();
    maybe_finish();
  }

  void start(std::size_t i, const Worker& w) {
    std::string error;
    const Process& p = *group_.processes()[i];
    if (!group_.start(i, w, error)) {
      const std::string what = "could not start " + p.name + ": " + error;
      spdlog::error("{}", what);
      outcome_.stop(Stop::spawn_failed(what));
      notify_failure(FailureNotice{rank_of(p), kExitError, what});
      begin_stop(SIGTERM);
      return;
    }
    pace_guard_.started(i);
    for (auto& o : observers_) o->process_started(generation_, p);
  }

  RestartDecision decide() const {
    return options_.restart_policy.decide(generation_, outcome_, pace_guard_.stall());
  }

  // Tells options_.on_failure, once, that this node's job ends failed.
  void notify_failure(const FailureNotice& notice) {
    if (failure_notified_ || !options_.on_failure) return;
    failure_notified_ = true;
    try {
      options_.on_failure(notice);
    } catch (const std::exception& e) {
      spdlog::error("could not report the failure to the other nodes: {}", e.what());
    }
  }

  // The generation has just failed here (outcome_.failure()): remember it, tell the observers.
  void on_failed() {
    const Failure& failure = *outcome_.failure();
    // Another node's words already say which generation: "generation K failed on node N: ...".
    history_.push_back(failure.kind == Failure::Kind::kPeer
                           ? failure.what
                           : "generation " + std::to_string(generation_.index()) + ": " +
                                 failure.what);
    for (auto& o : observers_) o->generation_failed(generation_, failure, group_);
  }

  // The generation has just failed on this node: tell the other nodes, and now when no restart
  // will follow.
  void tell_peers_if_final() {
    const Failure& failure = *outcome_.failure();
    if (options_.on_generation_failure && !failure_notified_) {
      try {
        options_.on_generation_failure(
            generation_, FailureNotice{failure.rank, failure.exit_code, failure.what});
      } catch (const std::exception& e) {
        spdlog::error("could not report the failure to the other nodes: {}", e.what());
      }
    }
    const RestartDecision d = decide();
    if (!d.restart()) notify_failure(FailureNotice{failure.rank, d.exit_code, failure.what});
  }

  // News from the other nodes: the job is over, or this generation failed there. (That every
  // node's part of it succeeded is read by maybe_finish().)
  void on_external_event() {
    if (outcome_.stage() == Stage::kDone || !options_.external_stop) return;
    on_external_stop();
    if (outcome_.stopped(Stop::Kind::kExternal) || outcome_.stage() == Stage::kRestarting) return;
    if (auto failure = options_.external_stop->generation_failure(generation_)) {
      if (outcome_.fail(Failure::peer(failure->first, failure->second))) {
        on_failed();
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
    if (outcome_.stage() == Stage::kDone || outcome_.stopped(Stop::Kind::kExternal)) return;
    auto request = options_.external_stop->requested();
    if (!request) return;
    failure_notified_ = true;  // the other nodes know: the news came from them
    if (!outcome_.stop(Stop::external(request->first, request->second))) return;
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
        for (auto& o : observers_) o->stacks_requested(generation_, group_);
      } else {
        on_interrupt(signo);
      }
      if (outcome_.stage() != Stage::kDone) wait_for_signal();
      maybe_finish();
    });
  }

  // Any of these signals ends the job: no restart follows, whatever state the job is in.
  void on_interrupt(int signo) {
    const Stop stop = Stop::interrupted(signo);
    outcome_.stop(stop);  // a second signal does not replace the first
    if (!group_.stopping()) {
      spdlog::warn("received {}: forwarding it to {} worker(s); send it again to kill them at once",
                   signal_name(signo), group_.running());
      notify_failure(FailureNotice{std::nullopt, stop.exit_code, stop.what});
      begin_stop(signo);
      return;
    }
    // Told again, or told while stopping after a failure: no more patience.
    if (group_.running() > 0) {
      spdlog::warn("received {} while stopping: killing {} worker(s) now", signal_name(signo),
                   group_.running());
      group_.kill_now();
    }
  }

  void begin_stop(int signo) {
    hang_guard_.cancel();
    pace_guard_.cancel();
    grace_timer_.cancel();
    group_.stop(signo);
  }

  // Servers after the trainers (roles.h): asked after every reap while the generation runs.
  void check_servers() {
    if (outcome_.stage() != Stage::kRunning || group_.stopping()) return;
    const ServersVerdict verdict = servers_.check(role_views(group_));
    if (verdict.action == ServersVerdict::Action::kWait) return;
    outcome_.enter(Stage::kServerGrace);
    hang_guard_.cancel();  // the grace bounds the wait from here on
    pace_guard_.cancel();
    if (verdict.action == ServersVerdict::Action::kStopNow) {
      stop_servers(verdict);
      return;
    }
    spdlog::debug("{}", servers_.grace_line(verdict));
    const Generation generation = generation_;
    grace_timer_.expires_after(*options_.server_grace);
    grace_timer_.async_wait([this, generation, verdict](const boost::system::error_code& ec) {
      if (ec || generation != generation_ || group_.stopping()) return;
      stop_servers(verdict);
    });
  }

  void stop_servers(const ServersVerdict& verdict) {
    const std::string line = servers_.stop(role_views(group_), verdict);
    if (line.empty()) return;
    spdlog::info("{}", line);
    group_.stop(SIGTERM);
  }

  void reap() {
    group_.reap();
    check_servers();
  }

  // A process of this generation was reaped (WorkerGroup::Events::exited).
  void on_exited(Process& p) {
    pace_guard_.exited(p.slot);
    for (auto& o : observers_) o->pace(generation_, p, pace_guard_.summary(p.slot));
    for (auto& o : observers_) o->process_exited(generation_, p);
    const bool failed = !(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0);
    if (!failed || group_.stopping() || !outcome_.ok()) return;
    const auto& processes = group_.processes();
    std::size_t i = 0;
    while (processes[i].get() != &p) ++i;
    outcome_.fail(worker_failure(group_, i));
    on_failed();
    spdlog::error("{} (pid {}) {}: stopping the other {} worker(s)", p.name, p.pid, ended(p),
                  group_.running());
    tell_peers_if_final();
    begin_stop(SIGTERM);
  }

  // The hang and pace guards of the current generation: off while its servers have their grace.
  std::function<bool()> watching() {
    return [this, generation = generation_] {
      return generation == generation_ && !group_.stopping() && outcome_.stage() == Stage::kRunning;
    };
  }
  void arm_pace_guard() {
    pace_guard_.begin_generation(group_, generation_, watching(),
                                 [this](const std::string& message) { on_hang(message); });
  }

  void on_hang(const std::string& message) {
    if (!outcome_.fail(Failure::hang(message))) return;
    spdlog::error("{}; stopping {} worker(s)", message, group_.running());  // before the dump
    on_failed();
    tell_peers_if_final();
    begin_stop(SIGTERM);
  }

  // Every process reaped: clean up stragglers in the groups, give the pipes a moment to drain,
  // wait for the other nodes when this node's part succeeded, then ask the restart policy.
  void maybe_finish() {
    const Stage stage = outcome_.stage();
    if (stage == Stage::kDone || stage == Stage::kRestarting || group_.running() > 0) return;
    if (stage == Stage::kRunning || stage == Stage::kServerGrace) {
      outcome_.enter(Stage::kDraining);
      hang_guard_.cancel();
      pace_guard_.cancel();
      grace_timer_.cancel();
      group_.finish();
    }
    if (!group_.output_closed()) return;
    // A job of several nodes succeeds when every node's part did: until the others say so (or
    // that the generation failed there), this node waits with nothing running.
    if (options_.on_generation_success && outcome_.ok() && !peers_succeeded()) {
      if (outcome_.stage() != Stage::kWaitingForPeers) {
        outcome_.enter(Stage::kWaitingForPeers);
        spdlog::info(
            "all {} worker(s) of this node exited with code 0; waiting for the other nodes",
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
    pace_guard_.generation_ended(generation_.index(), !outcome_.ok());
    for (auto& o : observers_) o->generation_ended(generation_, outcome_);
    const RestartDecision d = decide();
    if (d.restart()) {
      // Posted, so that no handler of the ending generation is still on the stack.
      outcome_.enter(Stage::kRestarting);
      asio::post(io_, [this] { restart(); });
      return;
    }
    finish_job(d.vetoed_by);
  }

  // Ends the job; `vetoed_by`: why a restart that was due does not happen (RestartDecision).
  void finish_job(const std::string& vetoed_by = "") {
    if (!vetoed_by.empty()) spdlog::warn("{}; not restarting: {}", outcome_.what(), vetoed_by);
    outcome_.enter(Stage::kDone);
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    io_.stop();
  }

  void restart() {
    // Asked again: a signal or an external stop may have arrived since the decision.
    const RestartDecision d = decide();
    if (!d.restart()) {
      finish_job(d.vetoed_by);
      return;
    }
    const Generation next = d.next;
    spdlog::error("{}; restarting the job (restart {} of {}){}", outcome_.what(), next.index(),
                  options_.restart_policy.max_restarts(),
                  failure_details(group_, outcome_.failure()));
    std::vector<Worker> workers;
    try {
      workers = make_generation_(next);
      group_.check_restart(workers, next.index(), options_.indices_may_change);
    } catch (const std::exception& e) {
      const std::string what =
          "could not prepare restart " + std::to_string(next.index()) + ": " + e.what();
      spdlog::error("{}", what);
      outcome_.stop(Stop::spawn_failed(what));
      notify_failure(FailureNotice{std::nullopt, kExitError, what});
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
        group_.rename(i, workers[i], outputs_.of(workers[i]));
      }
      const bool echo = p.output->echoes() && !echoed;
      p.output->start_generation(separator, echo);
      echoed = echoed || echo;
    }
    generation_ = next;
    start_generation(workers);
  }

  // The job is over: its summary line, the other nodes told, what supervise() returns.
  JobOutcome finish() {
    std::string note;
    if (auto cause =
            outcome_.failure() ? earlier_cause(group_, *outcome_.failure(), note) : std::nullopt) {
      spdlog::info("{}", note);
      outcome_.rename_cause(std::move(*cause));
    }
    if (!generation_.first() && !history_.empty()) {
      std::string lines;
      for (const std::string& h : history_) lines += "\n    " + h;
      spdlog::info("first failure of each generation:{}", lines);
    }
    const RestartDecision d = decide();
    JobOutcome out;
    out.restarts = generation_.index();
    out.servers_stopped = servers_.stopped().total();
    out.exit_code = d.restart() ? 1 : d.exit_code;  // a restart still due cannot be carried out
    out.last = outcome_;
    const std::string after = after_restarts(generation_);
    const auto& failure = outcome_.failure();
    if (const EndLine end = job_end_line(group_, outcome_, generation_, out.exit_code);
        !end.text.empty()) {
      spdlog::log(end.warning ? spdlog::level::warn : spdlog::level::err, "{}", end.text);
    }
    if (out.exit_code != 0) {
      FailureNotice notice{failure ? failure->rank : std::nullopt, out.exit_code, outcome_.what()};
      notice.from_peer = outcome_.from_peer();
      notify_failure(notice);
    } else if (const auto lines = servers_.success_lines(after); !lines.empty()) {
      for (const std::string& line : lines) spdlog::info("{}", line);
    } else {
      spdlog::info("all {} worker(s) exited with code 0{}", group_.size(), after);
    }
    return out;
  }

  const SupervisorOptions& options_;
  const GenerationFactory& make_generation_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer grace_timer_;  // servers after the trainers
  Observers observers_;             // fed by outputs_ and pace_guard_ too
  JobOutputs outputs_;
  PaceGuard pace_guard_;  // before group_, whose handlers feed it
  WorkerGroup group_;
  HangGuard hang_guard_;
  ServersAfterTrainers servers_;

  // Handlers capture the generation they were armed in and do nothing in a later one.
  Generation generation_;
  Outcome outcome_;                   // of the current generation: all the loop's state
  bool failure_notified_ = false;     // options_.on_failure was called, or need not be
  std::vector<std::string> history_;  // "generation K: <its first failure>"
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
