#include "launcher/report/run_report.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "launcher/report/html.h"
#include "launcher/report/metric_line.h"

namespace ddl::launcher {
namespace {

using nlohmann::json;

struct LossPoint {
  int generation = 0;
  long epoch = 0;
  long batch = 0;
  double loss = 0;
};

// A rank's own time in one step (launcher/health/pace.h), for the step-time chart.
struct StepPoint {
  int generation = 0;
  std::int64_t step = 0;
  double own_seconds = 0;
};

// Points thinned evenly: point number n (from 0, in arrival order) is kept while
// n % stride == 0; when more than kMaxLossPoints are kept, every other one goes and the stride
// doubles. The newest point is kept aside when the stride skips it, so the curve always ends
// where the training is.
template <typename Point>
class ThinnedSeries {
 public:
  void add(const Point& point) {
    if (seen_ % stride_ == 0) {
      kept_.push_back(point);
      latest_.reset();
      if (kept_.size() > kMaxLossPoints) thin();
    } else {
      latest_ = point;
    }
    ++seen_;
  }

  std::vector<Point> points() const {
    std::vector<Point> all = kept_;
    if (latest_) all.push_back(*latest_);
    return all;
  }
  long long seen() const { return seen_; }
  long long stride() const { return stride_; }

 private:
  void thin() {
    const Point newest = kept_.back();
    std::size_t out = 0;
    for (std::size_t i = 0; i < kept_.size(); i += 2) kept_[out++] = kept_[i];
    const bool newest_dropped = kept_.size() % 2 == 0;  // it sat at an odd position
    kept_.resize(out);
    stride_ *= 2;
    if (newest_dropped) latest_ = newest;
  }

  std::vector<Point> kept_;
  std::optional<Point> latest_;
  long long seen_ = 0;
  long long stride_ = 1;
};

using LossSeries = ThinnedSeries<LossPoint>;
using StepSeries = ThinnedSeries<StepPoint>;

struct EpochRecord {
  std::optional<double> mean_loss;
  std::optional<double> images_per_sec;
  std::optional<double> accuracy;  // a ratio
  long correct = 0;
  long total = 0;
};

struct Run {
  int generation = 0;
  int pid = 0;
  std::optional<WallClock::time_point> start;
  std::optional<WallClock::time_point> end;
  std::optional<int> wait_status;  // none while it runs
  ProcessUsage usage;
  std::optional<RunPace> pace;
};

struct StragglerEvent {
  WallClock::time_point at;
  std::string process;
  bool named = true;
  std::string line;
};

struct Process {
  std::string name;
  bool server = false;
  int index = -1;
  int generation = 0;  // of its latest start: where its lines go
  std::vector<Run> runs;
  long long lines = 0;
  long long metric_lines = 0;
  long long malformed_lines = 0;
  long long dropped_epoch_lines = 0;  // metric lines of epochs past kMaxEpochRecords
  std::map<std::pair<int, long>, EpochRecord> epochs;  // by (generation, epoch)
  LossSeries loss;
  StepSeries steps;
};

struct Generation {
  std::optional<int> world_size;
  std::optional<WallClock::time_point> start;
  std::optional<WallClock::time_point> end;
  std::optional<std::string> outcome;
};

std::string iso_time(WallClock::time_point at) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch());
  const time_t seconds = static_cast<time_t>(ms.count() / 1000);
  long millis = static_cast<long>(ms.count() % 1000);
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
  return buf;
}

long long unix_ms(WallClock::time_point at) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
}

// Sets key (ISO text) and key_ms (number), or both null.
void put_time(json& j, const std::string& key, const std::optional<WallClock::time_point>& at) {
  j[key] = at ? json(iso_time(*at)) : json();
  j[key + "_ms"] = at ? json(unix_ms(*at)) : json();
}

json seconds_between(const std::optional<WallClock::time_point>& start,
                     const std::optional<WallClock::time_point>& end) {
  if (!start || !end) return json();
  return std::chrono::duration<double>(*end - *start).count();
}

std::string signal_text(int signo) {
  // sigabbrev_np (glibc 2.32) knows every signal of this system, not just the common ones.
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(signo);
}

// The words match the launcher's own messages (launcher/supervise/exit_status.h).
json exit_json(int status) {
  json j;
  j["wait_status"] = status;
  if (WIFEXITED(status)) {
    j["text"] = "exited with code " + std::to_string(WEXITSTATUS(status));
    j["code"] = WEXITSTATUS(status);
    j["signal"] = json();
  } else if (WIFSIGNALED(status)) {
    const int signo = WTERMSIG(status);
    j["text"] =
        "was killed by " + signal_text(signo) + " (exit code " + std::to_string(128 + signo) + ")";
    j["code"] = 128 + signo;
    j["signal"] = signo;
    j["signal_name"] = signal_text(signo);
  } else {
    j["text"] = "ended with wait status " + std::to_string(status);
    j["code"] = 1;
    j["signal"] = json();
  }
  return j;
}

json optional_number(const std::optional<double>& value) { return value ? json(*value) : json(); }

// "rank 3" -> 3; -1 without a trailing number.
int trailing_index(const std::string& name) {
  const std::size_t space = name.rfind(' ');
  if (space == std::string::npos || space + 1 == name.size()) return -1;
  int value = 0;
  for (std::size_t i = space + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || value > 100000000) return -1;
    value = value * 10 + (name[i] - '0');
  }
  return value;
}

// Writes `text` to dir/name through a temporary file in the same folder and rename(2), so the
// file is the old one or the new one at every moment. No fsync: the report is for looking at
// after the job, not a record that must survive a crash of the machine.
void write_atomically(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::string temp = dir + "/." + name + ".XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    throw ReportError("run report: cannot write " + path + ": creating a temporary file in " + dir +
                      ": " + std::strerror(errno));
  }
  std::string failed;  // the step that failed, with errno's text
  auto check = [&](bool ok, const std::string& step) {
    if (!ok && failed.empty()) failed = step + ": " + std::strerror(errno);
    return ok;
  };
  // mkstemp makes the file private; the report is as readable as the logs beside it.
  check(::fchmod(fd, 0644) == 0, "setting the mode of " + temp);
  for (std::size_t done = 0; failed.empty() && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (check(n >= 0, "writing " + temp)) done += static_cast<std::size_t>(n);
  }
  check(::close(fd) == 0, "closing " + temp);
  if (failed.empty())
    check(::rename(temp.c_str(), path.c_str()) == 0, "renaming " + temp + " to it");
  if (!failed.empty()) {
    ::unlink(temp.c_str());
    throw ReportError("run report: cannot write " + path + ": " + failed);
  }
}

}  // namespace

struct RunReport::State {
  JobInfo info;
  std::vector<Process> processes;
  std::map<std::string, std::size_t> by_name;
  std::map<int, Generation> generations;
  std::optional<WallClock::time_point> job_end;
  std::optional<int> exit_code;
  std::optional<std::string> summary;
  std::vector<StragglerEvent> stragglers;
  long long stragglers_dropped = 0;
  std::vector<PreflightNumbers> preflight;

  Process& process(const std::string& name) {
    auto found = by_name.find(name);
    if (found != by_name.end()) return processes[found->second];
    // Not started yet (an event out of order): a guess from the name, in the latest generation.
    Process p;
    p.name = name;
    p.server = name.rfind("server", 0) == 0;
    p.index = trailing_index(name);
    p.generation = generations.empty() ? 0 : generations.rbegin()->first;
    by_name.emplace(name, processes.size());
    processes.push_back(std::move(p));
    return processes.back();
  }

  // The record for (the process's generation, epoch); null once kMaxEpochRecords are kept and
  // this is a new one.
  static EpochRecord* epoch_record(Process& p, long epoch) {
    const auto key = std::make_pair(p.generation, epoch);
    auto found = p.epochs.find(key);
    if (found != p.epochs.end()) return &found->second;
    if (p.epochs.size() >= kMaxEpochRecords) return nullptr;
    return &p.epochs[key];
  }

  // Ranks by index, then servers by index, then anything else by name.
  std::vector<const Process*> ordered() const {
    std::vector<const Process*> all;
    for (const Process& p : processes) all.push_back(&p);
    auto key = [](const Process* p) {
      const int group = p->index < 0 ? 2 : (p->server ? 1 : 0);
      return std::make_tuple(group, group == 2 ? 0 : p->index, p->name);
    };
    std::stable_sort(all.begin(), all.end(),
                     [&](const Process* a, const Process* b) { return key(a) < key(b); });
    return all;
  }

  std::optional<WallClock::time_point> job_start() const {
    std::optional<WallClock::time_point> first;
    auto consider = [&](const std::optional<WallClock::time_point>& at) {
      if (at && (!first || *at < *first)) first = at;
    };
    for (const auto& [number, g] : generations) consider(g.start);
    for (const Process& p : processes) {
      for (const Run& r : p.runs) consider(r.start);
    }
    return first;
  }
};

RunReport::RunReport(JobInfo info) : state_(std::make_unique<State>()) {
  state_->info = std::move(info);
}
RunReport::RunReport(RunReport&&) noexcept = default;
RunReport& RunReport::operator=(RunReport&&) noexcept = default;
RunReport::~RunReport() = default;

namespace {

// One run's start-up, in seconds from its generation's start (see run_report.h); null when the
// generation's start is not known.
json startup_json(const Run& r, const std::map<int, Generation>& generations) {
  const auto g = generations.find(r.generation);
  if (g == generations.end() || !g->second.start || !r.start) return json();
  const double spawn = std::chrono::duration<double>(*r.start - *g->second.start).count();
  json j;
  j["spawn_s"] = spawn;
  if (r.pace) {
    for (const auto& [name, seconds] : r.pace->phases) j[name + "_s"] = spawn + seconds;
    if (r.pace->first_step_seconds) j["first_step_s"] = spawn + *r.pace->first_step_seconds;
  }
  return j;
}

// Per phase, the process of generation `number` that reached it last.
json slowest_by_phase(const std::vector<Process>& processes,
                      const std::map<int, Generation>& generations, int number) {
  json slowest = json::object();
  for (const Process& p : processes) {
    for (const Run& r : p.runs) {
      if (r.generation != number) continue;
      const json startup = startup_json(r, generations);
      if (!startup.is_object()) continue;
      for (const auto& [key, value] : startup.items()) {
        const std::string phase = key.substr(0, key.size() - 2);  // without "_s"
        if (!slowest.contains(phase) ||
            value.get<double>() > slowest[phase]["seconds"].get<double>()) {
          slowest[phase] = {{"process", p.name}, {"seconds", value}};
        }
      }
    }
  }
  return slowest;
}

}  // namespace

void RunReport::generation_started(int generation, WallClock::time_point at, int world_size) {
  Generation& g = state_->generations[generation];
  g.start = at;
  g.world_size = world_size;
}

void RunReport::generation_ended(int generation, WallClock::time_point at,
                                 const std::string& outcome) {
  Generation& g = state_->generations[generation];
  g.end = at;
  g.outcome = outcome;
}

void RunReport::process_started(const std::string& name, bool server, int index, int generation,
                                int pid, WallClock::time_point at) {
  state_->generations.try_emplace(generation);
  Process& p = state_->process(name);
  p.server = server;
  p.index = index;
  p.generation = generation;
  Run run;
  run.generation = generation;
  run.pid = pid;
  run.start = at;
  p.runs.push_back(run);
}

void RunReport::process_line(const std::string& name, std::string_view line) {
  Process& p = state_->process(name);
  ++p.lines;
  const MetricLine m = parse_metric_line(line);
  switch (m.kind) {
    case MetricLine::Kind::kNone:
      return;
    case MetricLine::Kind::kMalformed:
      ++p.malformed_lines;
      return;
    case MetricLine::Kind::kProgress:
      ++p.metric_lines;
      p.loss.add({p.generation, m.epoch, m.batch, m.loss});
      return;
    case MetricLine::Kind::kAccuracy:
    case MetricLine::Kind::kEpochSummary:
      break;
  }
  ++p.metric_lines;
  EpochRecord* record = State::epoch_record(p, m.epoch);
  if (record == nullptr) {
    ++p.dropped_epoch_lines;
    return;
  }
  if (m.kind == MetricLine::Kind::kAccuracy) {
    record->accuracy = m.accuracy;
    record->correct = m.correct;
    record->total = m.total;
  } else {
    record->mean_loss = m.mean_loss;
    record->images_per_sec = m.images_per_sec;
  }
}

void RunReport::process_exited(const std::string& name, int generation, int wait_status,
                               const ProcessUsage& usage, WallClock::time_point at) {
  Process& p = state_->process(name);
  state_->generations.try_emplace(generation);
  Run* run = nullptr;
  for (auto it = p.runs.rbegin(); it != p.runs.rend() && run == nullptr; ++it) {
    if (it->generation == generation && !it->wait_status) run = &*it;
  }
  if (run == nullptr) {  // its start was never reported
    p.runs.emplace_back();
    run = &p.runs.back();
    run->generation = generation;
  }
  run->end = at;
  run->wait_status = wait_status;
  run->usage = usage;
}

void RunReport::process_pace(const std::string& name, int generation, const RunPace& pace) {
  Process& p = state_->process(name);
  for (auto it = p.runs.rbegin(); it != p.runs.rend(); ++it) {
    if (it->generation == generation) {
      it->pace = pace;
      return;
    }
  }
}

void RunReport::process_step(const std::string& name, std::int64_t step, double own_seconds) {
  Process& p = state_->process(name);
  p.steps.add(StepPoint{p.generation, step, own_seconds});
}

void RunReport::straggler(WallClock::time_point at, const std::string& name, bool named,
                          const std::string& line) {
  if (state_->stragglers.size() >= kMaxStragglerEvents) {
    ++state_->stragglers_dropped;
    return;
  }
  state_->stragglers.push_back(StragglerEvent{at, name, named, line});
}

void RunReport::preflight(const PreflightNumbers& numbers) {
  if (state_->preflight.size() < kMaxPreflightChecks) state_->preflight.push_back(numbers);
}

void RunReport::job_ended(WallClock::time_point at, int exit_code, const std::string& summary) {
  state_->job_end = at;
  state_->exit_code = exit_code;
  state_->summary = summary;
}

json RunReport::to_json() const {
  const State& s = *state_;
  json report;
  report["format"] = kReportFormat;
  report["version"] = kReportVersion;

  json job;
  job["job_id"] = s.info.job_id;
  job["worker"] = s.info.worker;
  job["node_rank"] = s.info.node_rank;
  job["nnodes"] = s.info.nnodes;
  const auto start = s.job_start();
  put_time(job, "start", start);
  put_time(job, "end", s.job_end);
  job["duration_s"] = seconds_between(start, s.job_end);
  job["exit_code"] = s.exit_code ? json(*s.exit_code) : json();
  job["summary"] = s.summary ? json(*s.summary) : json();
  report["job"] = job;

  report["limits"] = {{"max_loss_points_per_process", kMaxLossPoints},
                      {"max_epoch_records_per_process", kMaxEpochRecords}};

  json generations = json::array();
  for (const auto& [number, g] : s.generations) {
    json j;
    j["generation"] = number;
    j["world_size"] = g.world_size ? json(*g.world_size) : json();
    put_time(j, "start", g.start);
    put_time(j, "end", g.end);
    j["duration_s"] = seconds_between(g.start, g.end);
    j["outcome"] = g.outcome ? json(*g.outcome) : json();
    j["startup"] = slowest_by_phase(s.processes, s.generations, number);
    generations.push_back(j);
  }
  report["generations"] = generations;

  json processes = json::array();
  for (const Process* p : s.ordered()) {
    json j;
    j["name"] = p->name;
    j["role"] = p->server ? "server" : "rank";
    j["index"] = p->index;
    std::set<int> gens;
    double cpu = 0;
    long peak = 0;
    bool reaped = false;  // a run has ended: its usage is known
    json runs = json::array();
    for (const Run& r : p->runs) {
      gens.insert(r.generation);
      reaped = reaped || r.wait_status.has_value();
      cpu += r.usage.cpu_seconds;
      peak = std::max(peak, r.usage.peak_rss_kib);
      json rj;
      rj["generation"] = r.generation;
      rj["pid"] = r.pid;
      put_time(rj, "start", r.start);
      put_time(rj, "end", r.end);
      rj["duration_s"] = seconds_between(r.start, r.end);
      rj["exit"] = r.wait_status ? exit_json(*r.wait_status) : json();
      rj["cpu_seconds"] = r.wait_status ? json(r.usage.cpu_seconds) : json();
      rj["peak_rss_kib"] = r.wait_status ? json(r.usage.peak_rss_kib) : json();
      rj["startup"] = startup_json(r, s.generations);
      if (r.pace) {
        const RunPace& pace = *r.pace;
        auto opt = [](const auto& v) { return v ? json(*v) : json(); };
        rj["pace"] = {{"steps", pace.steps},
                      {"last_step", opt(pace.last_step)},
                      {"last_checkpoint", opt(pace.last_checkpoint)},
                      {"step_s", opt(pace.step_seconds)},
                      {"own_s", opt(pace.own_seconds)},
                      {"straggler", pace.straggler},
                      {"batches_per_epoch", opt(pace.batches_per_epoch)}};
      } else {
        rj["pace"] = json();
      }
      runs.push_back(rj);
    }
    j["generations"] = gens;
    const Run* last = p->runs.empty() ? nullptr : &p->runs.back();
    j["exit"] = last && last->wait_status ? exit_json(*last->wait_status) : json();
    j["cpu_seconds"] = reaped ? json(cpu) : json();
    j["peak_rss_kib"] = reaped ? json(peak) : json();
    j["lines"] = p->lines;
    j["metric_lines"] = p->metric_lines;
    j["malformed_metric_lines"] = p->malformed_lines;
    j["dropped_epoch_lines"] = p->dropped_epoch_lines;

    json epochs = json::array();
    double rate_sum = 0;
    int rate_count = 0;
    for (const auto& [key, e] : p->epochs) {
      json ej;
      ej["generation"] = key.first;
      ej["epoch"] = key.second;
      ej["mean_loss"] = optional_number(e.mean_loss);
      ej["images_per_sec"] = optional_number(e.images_per_sec);
      ej["accuracy"] = optional_number(e.accuracy);
      ej["correct"] = e.accuracy ? json(e.correct) : json();
      ej["total"] = e.accuracy ? json(e.total) : json();
      epochs.push_back(ej);
      if (e.images_per_sec) {
        rate_sum += *e.images_per_sec;
        ++rate_count;
      }
    }
    j["epochs"] = epochs;
    j["mean_images_per_sec"] = rate_count > 0 ? json(rate_sum / rate_count) : json();

    json points = json::array();
    for (const LossPoint& lp : p->loss.points()) {
      points.push_back({lp.generation, lp.epoch, lp.batch, lp.loss});
    }
    j["loss"] = {{"seen", p->loss.seen()},
                 {"stride", p->loss.stride()},
                 {"fields", {"generation", "epoch", "batch", "loss"}},
                 {"points", points}};
    json step_points = json::array();
    for (const StepPoint& sp : p->steps.points()) {
      step_points.push_back({sp.generation, sp.step, sp.own_seconds});
    }
    j["step_times"] = {{"seen", p->steps.seen()},
                       {"stride", p->steps.stride()},
                       {"fields", {"generation", "step", "own_s"}},
                       {"points", step_points}};
    j["runs"] = runs;
    processes.push_back(j);
  }
  report["processes"] = processes;
  json stragglers = json::array();
  for (const StragglerEvent& e : s.stragglers) {
    json j;
    j["process"] = e.process;
    put_time(j, "at", e.at);
    j["named"] = e.named;
    j["line"] = e.line;
    stragglers.push_back(j);
  }
  report["stragglers"] = stragglers;
  report["stragglers_dropped"] = s.stragglers_dropped;
  json checks = json::array();
  for (const PreflightNumbers& c : s.preflight) {
    json nodes = json::array();
    for (const PreflightNumbers::Node& n : c.nodes) {
      nodes.push_back({{"node", n.node},
                       {"gflops", n.gflops},
                       {"best_out_mbs", n.best_out_mbs ? json(*n.best_out_mbs) : json(nullptr)},
                       {"best_in_mbs", n.best_in_mbs ? json(*n.best_in_mbs) : json(nullptr)},
                       {"named", n.named}});
    }
    checks.push_back({{"generation", c.generation},
                      {"seconds", c.seconds},
                      {"outcome", c.outcome},
                      {"nodes", nodes}});
  }
  report["preflight"] = checks;
  return report;
}

std::string RunReport::to_html() const { return render_report_html(to_json()); }

void RunReport::write(const std::string& dir) const {
  const json report = to_json();
  // Text from the processes may hold any bytes; JSON must be UTF-8.
  write_atomically(dir, "report.json",
                   report.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  write_atomically(dir, "report.html", render_report_html(report));
}

json RunReport::read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ReportError("run report: cannot read " + path + ": " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  json report = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded()) throw ReportError("run report: " + path + " is not valid JSON");
  if (!report.is_object() || report.value("format", "") != kReportFormat) {
    throw ReportError("run report: " + path + " is not a run report (no \"format\": \"" +
                      std::string(kReportFormat) + "\")");
  }
  const json version = report.value("version", json());
  if (!version.is_number_integer() || version.get<int>() != kReportVersion) {
    throw ReportError("run report: " + path + " has version " + version.dump() +
                      ", this launcher reads version " + std::to_string(kReportVersion));
  }
  return report;
}

}  // namespace ddl::launcher
