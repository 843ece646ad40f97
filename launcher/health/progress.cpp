#include "launcher/health/progress.h"

#include <charconv>
#include <cmath>

namespace ddl::launcher {

namespace {

// Splits on runs of spaces and tabs.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t begin = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > begin) out.push_back(line.substr(begin, i - begin));
  }
  return out;
}

std::optional<std::int64_t> step_number(std::string_view text) {
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0) return std::nullopt;
  return n;
}

std::optional<double> seconds(std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < 0) {
    return std::nullopt;
  }
  return v;
}

bool section_name_ok(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool is_waiting_section(std::string_view name) {
  return name == "allreduce" || name == "comm" || name == "collective" || name == "wait";
}

double ProgressMessage::waiting_seconds() const {
  double sum = 0;
  for (const auto& [name, s] : sections) {
    if (is_waiting_section(name)) sum += s;
  }
  return sum;
}

std::optional<ProgressMessage> parse_progress_line(std::string_view line, std::string& error) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() > kMaxProgressLine) {
    error = "longer than " + std::to_string(kMaxProgressLine) + " bytes";
    return std::nullopt;
  }
  const std::vector<std::string_view> w = words(line);
  if (w.empty()) {
    error = "empty";
    return std::nullopt;
  }
  ProgressMessage m;
  if (w[0] == "pause") {
    m.kind = ProgressMessage::Kind::kPause;
    const std::size_t rest = line.find("pause") + 5;
    std::string_view what = line.substr(rest);
    while (!what.empty() && (what.front() == ' ' || what.front() == '\t')) what.remove_prefix(1);
    m.what = std::string(what);
    return m;
  }
  if (w[0] == "phase") {
    if (w.size() != 2 || !section_name_ok(w[1])) {
      error = "phase takes one name";
      return std::nullopt;
    }
    m.kind = ProgressMessage::Kind::kPhase;
    m.what = std::string(w[1]);
    return m;
  }
  if (w[0] == "epoch") {
    const auto e = w.size() == 3 ? step_number(w[1]) : std::nullopt;
    const auto b = w.size() == 3 ? step_number(w[2]) : std::nullopt;
    if (!e || !b || *b == 0) {
      error = "epoch takes an epoch number and its batches (more than 0)";
      return std::nullopt;
    }
    m.kind = ProgressMessage::Kind::kEpoch;
    m.step = *e;
    m.batches = *b;
    return m;
  }
  if (w[0] != "step" && w[0] != "checkpoint") {
    error = "not step, pause, checkpoint, phase or epoch";
    return std::nullopt;
  }
  m.kind = w[0] == "step" ? ProgressMessage::Kind::kStep : ProgressMessage::Kind::kCheckpoint;
  const auto n = w.size() > 1 ? step_number(w[1]) : std::nullopt;
  if (!n) {
    error = std::string(w[0]) + " needs a step number (0 or more)";
    return std::nullopt;
  }
  m.step = *n;
  if (m.kind == ProgressMessage::Kind::kCheckpoint && w.size() > 2) {
    error = "checkpoint takes only a step number";
    return std::nullopt;
  }
  for (std::size_t i = 2; i < w.size(); ++i) {
    const std::size_t eq = w[i].find('=');
    const auto name = w[i].substr(0, eq);
    const auto value = eq == std::string_view::npos ? std::nullopt : seconds(w[i].substr(eq + 1));
    if (!section_name_ok(name) || !value) {
      error = "section '" + std::string(w[i]) + "' is not NAME=SECONDS";
      return std::nullopt;
    }
    m.sections.emplace_back(std::string(name), *value);
  }
  return m;
}

}  // namespace ddl::launcher
