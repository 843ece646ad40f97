#include "launcher/report/metric_line.h"

#include <charconv>
#include <system_error>

namespace ddl::launcher {
namespace {

// Reads a line left to right; every step fails (returns false) without moving on a mismatch.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : rest_(text) {}

  bool literal(std::string_view word) {
    if (rest_.substr(0, word.size()) != word) return false;
    rest_.remove_prefix(word.size());
    return true;
  }

  bool count(long& out) {
    const char* end = rest_.data() + rest_.size();
    const auto [ptr, ec] = std::from_chars(rest_.data(), end, out);
    if (ec != std::errc() || out < 0) return false;
    rest_.remove_prefix(static_cast<std::size_t>(ptr - rest_.data()));
    return true;
  }

  bool number(double& out) {
    const char* end = rest_.data() + rest_.size();
    // from_chars rejects a leading '+', which printf-style output never has but a human might.
    const char* begin = rest_.data();
    if (begin != end && *begin == '+') ++begin;
    const auto [ptr, ec] = std::from_chars(begin, end, out);
    if (ec != std::errc()) return false;
    rest_.remove_prefix(static_cast<std::size_t>(ptr - rest_.data()));
    return true;
  }

  bool at_end() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

std::string_view trimmed(std::string_view line) {
  std::size_t start = 0;
  while (start < line.size() && (line[start] == ' ' || line[start] == '\t')) ++start;
  line.remove_prefix(start);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

MetricLine parse_metric_line(std::string_view line) {
  MetricLine m;
  Cursor c(trimmed(line));
  if (!c.literal("epoch: ")) return m;
  m.kind = MetricLine::Kind::kMalformed;
  if (!c.count(m.epoch) || !c.literal(", ")) return m;

  if (c.literal("batch: ")) {
    if (c.count(m.batch) && c.literal(", loss is: [") && c.number(m.loss) && c.literal("]") &&
        c.at_end()) {
      m.kind = MetricLine::Kind::kProgress;
    }
    return m;
  }
  if (c.literal("test accuracy: ")) {
    double printed = 0;
    if (!c.number(printed)) return m;
    const bool percent = c.literal("%");
    if (c.literal(" (") && c.count(m.correct) && c.literal("/") && c.count(m.total) &&
        c.literal(")") && c.at_end()) {
      m.kind = MetricLine::Kind::kAccuracy;
      // The counts are exact; the printed figure is rounded and has come as a ratio and as a
      // percentage in different versions of the trainer.
      m.accuracy = m.total > 0 ? static_cast<double>(m.correct) / static_cast<double>(m.total)
                               : (percent ? printed / 100 : printed);
    }
    return m;
  }
  if (c.literal("mean loss: ")) {
    if (c.number(m.mean_loss) && c.literal(", images/s: ") && c.number(m.images_per_sec) &&
        c.at_end()) {
      m.kind = MetricLine::Kind::kEpochSummary;
    }
    return m;
  }
  return m;
}

}  // namespace ddl::launcher
