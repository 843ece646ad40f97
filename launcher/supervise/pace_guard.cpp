#include "launcher/supervise/pace_guard.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <string>
#include <utility>

namespace ddl::launcher {

namespace {

// The state letter of /proc/PID/stat ('R', 'S', 'T', ...); 0 when it cannot be read.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const std::size_t close = text.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < text.size() ? text[close + 2] : '\0';
}

// "; rank 1 is stopped (state T: SIGSTOP or a debugger)" for each such running process.
std::string stopped_note(const WorkerGroup& group) {
  std::string note;
  for (const auto& p : group.processes()) {
    if (!p->running) continue;
    const char state = process_state(p->pid);
    if (state == 'T' || state == 't') {
      note += "; " + p->name + " is stopped (state " + std::string(1, state) +
              ": SIGSTOP or a debugger)";
    }
  }
  return note;
}

}  // namespace

PaceGuard::PaceGuard(boost::asio::io_context& io, PaceOptions options, std::string where,
                     const Observers& observers, NodePaceSink node_pace, NodeVerdicts node_verdicts)
    : timer_(io),
      tracker_(options, {}, std::move(where)),
      observers_(observers),
      node_pace_(std::move(node_pace)),
      node_verdicts_(std::move(node_verdicts)) {}

void PaceGuard::begin_generation(const WorkerGroup& group, Generation g, Watching watching,
                                 Late late) {
  generation_ = g;
  timer_.cancel();
  armed_for_.reset();
  group_ = &group;
  std::vector<std::string> names;
  for (const auto& p : group.processes()) names.push_back(p->name);
  warned_.assign(names.size(), false);
  names_ = names;
  tracker_.begin_generation(std::move(names));
  told_at_.reset();
  watching_ = std::move(watching);
  late_ = std::move(late);
}

void PaceGuard::cancel() {
  timer_.cancel();
  armed_for_.reset();
}

void PaceGuard::generation_ended(int index, bool failed) {
  take_node_verdicts();  // an eviction ends the generation it was reached in
  std::vector<PaceTracker::Summary> paces;
  for (std::size_t i = 0; i < tracker_.size(); ++i) paces.push_back(tracker_.summary(i));
  ledger_.generation_ended(index, paces, failed);
}

void PaceGuard::started(std::size_t i) { tracker_.started(i, PaceTracker::Clock::now()); }

void PaceGuard::exited(std::size_t i) {
  tracker_.exited(i);
  rearm();
}

void PaceGuard::on_line(std::size_t i, const std::string& line) {
  std::string error;
  const auto message = parse_progress_line(line, error);
  if (!message) {
    if (i < warned_.size() && !warned_[i]) {
      warned_[i] = true;
      spdlog::warn("{}: not a progress message ({}): '{}'; later ones are dropped without a word",
                   names_[i], error, line.substr(0, 80));
    }
    return;
  }
  const auto verdict = tracker_.on_message(i, *message, PaceTracker::Clock::now());
  if (const auto own = tracker_.counted_own(i);
      own && message->kind == ProgressMessage::Kind::kStep && group_ != nullptr) {
    for (auto& o : observers_)
      o->step_time(generation_, *group_->processes()[i], message->step, *own);
    tell_node_pace(message->step);
  }
  if (verdict) {
    spdlog::warn("{}", verdict->message);
    for (auto& o : observers_) o->straggler(generation_, *verdict);
  }
  if (message->kind == ProgressMessage::Kind::kStep ||
      message->kind == ProgressMessage::Kind::kPause) {
    rearm();
  }
}

void PaceGuard::tell_node_pace(std::int64_t step) {
  const auto now = PaceTracker::Clock::now();
  if (!node_pace_ || (told_at_ && now - *told_at_ < kNodePaceEvery)) return;
  std::vector<double> own;
  for (std::size_t i = 0; i < tracker_.size(); ++i) {
    if (const auto s = tracker_.summary(i).own_seconds) own.push_back(*s);
  }
  if (own.empty()) return;
  told_at_ = now;
  node_pace_(generation_, step, median_of(own));
  take_node_verdicts();
}

void PaceGuard::take_node_verdicts() {
  if (!node_verdicts_) return;
  for (const NodePaceJudge::Verdict& v : node_verdicts_()) {
    // A node's verdict names the node; it has no process here (process stays 0, unused).
    const PaceTracker::Verdict verdict{v.straggler, 0, "node " + std::to_string(v.node), v.message};
    for (auto& o : observers_) o->straggler(generation_, verdict);
  }
}

// Sets the timer to the earliest deadline, unless it is already set for it (most steps only move
// a deadline later, and the timer then finds out by itself when it wakes).
void PaceGuard::rearm() {
  const auto deadline = tracker_.next_deadline();
  if (!deadline || !late_) {
    if (armed_for_) timer_.cancel();
    armed_for_.reset();
    return;
  }
  if (armed_for_ && *armed_for_ <= *deadline) return;
  armed_for_ = deadline;
  timer_.expires_at(*deadline);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    armed_for_.reset();
    if (!watching_ || !watching_()) return;
    if (auto message = tracker_.late(PaceTracker::Clock::now())) {
      late_(*message + stopped_note(*group_));
      return;
    }
    rearm();
  });
}

}  // namespace ddl::launcher
