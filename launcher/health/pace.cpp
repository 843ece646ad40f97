#include "launcher/health/pace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace ddl::launcher {

namespace {

double seconds_between(PaceTracker::Clock::time_point a, PaceTracker::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// "31.2 ms" under a second, "2.60 s" from there.
std::string time_text(double seconds) {
  char text[32];
  if (seconds < 1.0) {
    std::snprintf(text, sizeof text, "%.1f ms", seconds * 1000.0);
  } else {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  }
  return text;
}

std::string ratio_text(double r) {
  char text[16];
  std::snprintf(text, sizeof text, "%.2fx", r);
  return text;
}

// "5", "2.5": a factor as given.
std::string factor_text(double f) {
  char text[16];
  std::snprintf(text, sizeof text, "%g", f);
  return text;
}

void push_window(std::deque<double>& w, double v) {
  w.push_back(v);
  if (w.size() > kPaceWindow) w.pop_front();
}

double window_median(const std::deque<double>& w) {
  std::vector<double> v(w.begin(), w.end());
  return median_of(v);
}

}  // namespace

std::string step_time_text(double seconds) { return time_text(seconds); }

double median_of(std::vector<double>& v) {
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

PaceTracker::PaceTracker(PaceOptions options, std::vector<std::string> names, std::string where)
    : options_(options), where_(std::move(where)) {
  begin_generation(std::move(names));
}

void PaceTracker::begin_generation(std::vector<std::string> names) {
  ranks_.clear();
  ranks_.resize(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) ranks_[i].name = std::move(names[i]);
}

void PaceTracker::started(std::size_t i, Clock::time_point now) {
  if (i >= ranks_.size()) return;
  Rank& r = ranks_[i];
  const std::string name = std::move(r.name);
  r = Rank{};
  r.name = name;
  r.running = true;
  r.started_at = now;
}

void PaceTracker::exited(std::size_t i) {
  if (i < ranks_.size()) ranks_[i].running = false;
}

std::optional<PaceTracker::Verdict> PaceTracker::on_message(std::size_t i, const ProgressMessage& m,
                                                            Clock::time_point now) {
  if (i >= ranks_.size()) return std::nullopt;
  Rank& r = ranks_[i];
  switch (m.kind) {
    case ProgressMessage::Kind::kPause:
      r.paused = true;
      return std::nullopt;
    case ProgressMessage::Kind::kCheckpoint:
      r.last_checkpoint = std::max(r.last_checkpoint.value_or(m.step), m.step);
      return std::nullopt;
    case ProgressMessage::Kind::kPhase:
      if (r.phases.size() < kMaxPhases) {
        r.phases.emplace_back(m.what, seconds_between(r.started_at, now));
      }
      return std::nullopt;
    case ProgressMessage::Kind::kEpoch:
      r.batches_per_epoch = m.batches;
      return std::nullopt;
    case ProgressMessage::Kind::kStep:
      break;
  }
  const bool after_pause = r.paused;
  const Clock::time_point since = r.last_step_at.value_or(r.started_at);
  r.paused = false;
  r.last_step_at = now;
  r.last_step = m.step;
  if (r.steps == 0) r.first_step_seconds = seconds_between(r.started_at, now);
  ++r.steps;
  r.counted_own.reset();
  // Start-up and whatever came after a pause are not the pace of a step.
  if (r.steps <= kPaceWarmup || after_pause) return std::nullopt;
  const double interval = seconds_between(since, now);
  r.counted_own = std::max(0.0, interval - m.waiting_seconds());
  push_window(r.intervals, interval);
  push_window(r.own, *r.counted_own);
  if (!r.baseline && r.own.size() == kPaceWindow) r.baseline = window_median(r.own);
  return options_.stragglers ? judge(i, now) : std::nullopt;
}

std::optional<PaceTracker::Verdict> PaceTracker::judge(std::size_t i, Clock::time_point) {
  Rank& r = ranks_[i];
  if (r.own.size() < kPaceWindow) return std::nullopt;
  std::vector<double> others;
  for (std::size_t j = 0; j < ranks_.size(); ++j) {
    if (j != i && ranks_[j].running && ranks_[j].own.size() == kPaceWindow) {
      others.push_back(window_median(ranks_[j].own));
    }
  }
  if (others.empty()) return std::nullopt;
  const double x = window_median(r.own);
  // The kSlowSteps-th largest own time of the window: over a threshold only when at least
  // kSlowSteps of the last kPaceWindow steps are.
  std::vector<double> sorted(r.own.begin(), r.own.end());
  std::sort(sorted.begin(), sorted.end());
  const double q = sorted[kPaceWindow - kSlowSteps];
  const double m = median_of(others);
  std::vector<double> deviations;
  for (const double o : others) deviations.push_back(std::fabs(o - m));
  const double mad = median_of(deviations);
  // Slow against the others, and turned slow against its own earlier pace; and slower than the
  // others at nearly every step of the window, not in a brief spell.
  const double ratio = options_.straggler_ratio;
  const bool slow = x >= ratio * m && x - m > std::max(3 * 1.4826 * mad, kStragglerMinGap) &&
                    r.baseline && x >= ratio * *r.baseline && q >= (1 + (ratio - 1) / 2) * m;
  const bool normal = x < kRecoveredRatio * m;
  r.slow_streak = slow ? r.slow_streak + 1 : 0;
  r.normal_streak = normal ? r.normal_streak + 1 : 0;
  const std::string who = r.name + (where_.empty() ? "" : " " + where_);
  if (!r.named && r.slow_streak >= kPaceSustain) {
    r.named = true;
    r.normal_streak = 0;
    std::string line = "straggler: " + who + " takes " + time_text(x) + " of its own per step, " +
                       ratio_text(m > 0 ? x / m : 0) + " the other ranks' median " + time_text(m) +
                       " (last " + std::to_string(kPaceWindow) + " steps, at step " +
                       std::to_string(r.last_step.value_or(0)) + ")";
    if (r.baseline) line += "; its own first steps took " + time_text(*r.baseline);
    return Verdict{true, i, r.name, std::move(line)};
  }
  if (r.named && r.normal_streak >= kPaceSustain) {
    r.named = false;
    r.slow_streak = 0;
    return Verdict{false, i, r.name,
                   "straggler: " + who + " is back at the other ranks' pace (" + time_text(x) +
                       " of its own per step, their median " + time_text(m) + ", at step " +
                       std::to_string(r.last_step.value_or(0)) + ")"};
  }
  return std::nullopt;
}

std::optional<double> PaceTracker::job_pace() const {
  std::vector<double> paces;
  for (const Rank& r : ranks_) {
    if (r.intervals.size() == kPaceWindow) paces.push_back(window_median(r.intervals));
  }
  if (paces.empty()) return std::nullopt;
  return median_of(paces);
}

std::optional<std::chrono::milliseconds> PaceTracker::step_timeout() const {
  if (options_.step_timeout_factor <= 0) return std::nullopt;
  const auto pace = job_pace();
  if (!pace) return std::nullopt;
  const auto by_pace = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::ceil(*pace * options_.step_timeout_factor * 1000.0)));
  return std::max(options_.step_timeout_floor, by_pace);
}

std::optional<PaceTracker::Clock::time_point> PaceTracker::next_deadline() const {
  const auto timeout = step_timeout();
  if (!timeout) return std::nullopt;
  std::optional<Clock::time_point> earliest;
  for (const Rank& r : ranks_) {
    if (!r.running || r.paused || !r.last_step_at) continue;
    const auto deadline = *r.last_step_at + *timeout;
    if (!earliest || deadline < *earliest) earliest = deadline;
  }
  return earliest;
}

std::optional<std::string> PaceTracker::late(Clock::time_point now) const {
  const auto timeout = step_timeout();
  if (!timeout) return std::nullopt;
  std::string names;
  std::string steps;
  double longest = 0;
  for (const Rank& r : ranks_) {
    if (!r.running || !r.last_step_at) continue;
    const double ago = seconds_between(*r.last_step_at, now);
    steps += (steps.empty() ? "" : ", ") + r.name + " at step " +
             std::to_string(r.last_step.value_or(0)) + " " + time_text(ago) + " ago" +
             (r.paused ? " (paused)" : "");
    if (r.paused || now - *r.last_step_at < *timeout) continue;
    names += (names.empty() ? "" : ", ") + r.name;
    longest = std::max(longest, ago);
  }
  if (names.empty()) return std::nullopt;
  const double pace = job_pace().value_or(0);
  return "step timeout: no step finished for " + time_text(longest) + " by " + names +
         " (the job's pace is " + time_text(pace) + " per step; the timeout " +
         time_text(std::chrono::duration<double>(*timeout).count()) + " is " +
         factor_text(options_.step_timeout_factor) + " times that, at least " +
         time_text(std::chrono::duration<double>(options_.step_timeout_floor).count()) +
         "); last steps: " + steps;
}

std::optional<double> PaceTracker::counted_own(std::size_t i) const {
  return i < ranks_.size() ? ranks_[i].counted_own : std::nullopt;
}

PaceTracker::Summary PaceTracker::summary(std::size_t i) const {
  Summary s;
  if (i >= ranks_.size()) return s;
  const Rank& r = ranks_[i];
  s.steps = r.steps;
  s.last_step = r.last_step;
  s.last_checkpoint = r.last_checkpoint;
  if (!r.intervals.empty()) s.step_seconds = window_median(r.intervals);
  if (!r.own.empty()) s.own_seconds = window_median(r.own);
  s.straggler = r.named;
  s.phases = r.phases;
  s.first_step_seconds = r.first_step_seconds;
  s.batches_per_epoch = r.batches_per_epoch;
  return s;
}

}  // namespace ddl::launcher
