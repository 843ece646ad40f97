#include "launcher/report/html.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <optional>
#include <vector>

namespace ddl::launcher {
namespace {

using nlohmann::json;

// --- text -----------------------------------------------------------------------------------

__attribute__((format(printf, 1, 2))) std::string strf(const char* format, ...) {
  char small[256];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  if (n < 0) return {};
  if (static_cast<std::size_t>(n) < sizeof(small)) return std::string(small, n);
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(big.data(), big.size(), format, args);
  va_end(args);
  big.resize(static_cast<std::size_t>(n));
  return big;
}

std::string esc(const std::string& text) { return html_escape(text); }

std::string fixed(double value, int decimals) { return strf("%.*f", decimals, value); }

// Coordinates in the SVG: a tenth of a pixel is plenty.
std::string px(double value) { return strf("%.1f", value); }

// 12345.6 -> "12,346".
std::string thousands(double value) {
  std::string digits = strf("%.0f", std::fabs(value));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (value < 0 && digits != "0" ? "-" : "") + out;
}

std::string duration_text(double seconds) {
  if (seconds < 60) return strf("%.1f s", seconds);
  const long total = std::lround(seconds);
  if (total < 3600) return strf("%ld min %02ld s", total / 60, total % 60);
  return strf("%ld h %02ld min", total / 3600, (total % 3600) / 60);
}

std::string size_text(double kib) {
  if (kib < 1024) return strf("%.0f KiB", kib);
  if (kib < 1024.0 * 1024) return strf("%.1f MiB", kib / 1024);
  return strf("%.2f GiB", kib / (1024.0 * 1024));
}

std::string clock_text(double unix_ms) {
  const time_t seconds = static_cast<time_t>(std::floor(unix_ms / 1000));
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  return strf("%04d-%02d-%02d %02d:%02d:%02d UTC", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
              utc.tm_hour, utc.tm_min, utc.tm_sec);
}

// Rough width of `text` at the charts' 12 px sans-serif, to lay out legends and labels.
double text_width(const std::string& text, double font_px = 12) {
  return static_cast<double>(text.size()) * font_px * 0.56;
}

// --- reading the report's JSON ----------------------------------------------------------------

const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::optional<double> number(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::string text(const json& j, const char* key, const std::string& absent = "-") {
  const json& v = field(j, key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  return absent;
}

const json& array(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json& v = field(j, key);
  return v.is_array() ? v : kEmpty;
}

// --- charts -----------------------------------------------------------------------------------

// Tableau's ten categorical colours: distinguishable, and in this order the neighbours differ.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
std::string color_of(std::size_t i) { return kPalette[i % (sizeof(kPalette) / sizeof(*kPalette))]; }

constexpr const char* kGreen = "#3a9d4f";
constexpr const char* kRed = "#d64545";
constexpr const char* kOrange = "#ee9a2e";
constexpr const char* kGrey = "#a7a7a7";

// An axis range with round tick marks (1, 2 or 5 times a power of ten apart).
struct Scale {
  double lo = 0;
  double hi = 1;
  double step = 1;

  std::vector<double> ticks() const {
    std::vector<double> out;
    const long n = std::lround((hi - lo) / step);
    for (long i = 0; i <= n; ++i) out.push_back(lo + static_cast<double>(i) * step);
    return out;
  }
  std::string label(double v) const {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    if (std::fabs(v) < step * 1e-6) v = 0;  // no "-0.0"
    return fixed(v, decimals);
  }
};

Scale nice_scale(double lo, double hi, int target_ticks, bool integer) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target_ticks;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double n = raw / magnitude;
  double step = (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * magnitude;
  if (integer) step = std::max(1.0, std::round(step));
  Scale s;
  s.step = step;
  s.lo = std::floor(lo / step + 1e-9) * step;
  s.hi = std::ceil(hi / step - 1e-9) * step;
  if (!(s.hi > s.lo)) s.hi = s.lo + step;
  return s;
}

struct Plot {
  double left = 0;
  double top = 0;
  double width = 0;
  double height = 0;
  Scale x;
  Scale y;
  double px_of(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * width; }
  double py_of(double v) const { return top + height - (v - y.lo) / (y.hi - y.lo) * height; }
};

std::string svg_open(double width, double height, const std::string& label) {
  return strf(
             "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" "
             "width=\"%.0f\" height=\"%.0f\" role=\"img\" aria-label=\"",
             width, height, width, height) +
         esc(label) + "\">\n";
}

// Grid, ticks and axis titles around the plot area; `x_ticks` false leaves the x axis unlabelled
// (bar charts label their bars instead).
void draw_axes(std::string& svg, const Plot& p, const std::string& x_title,
               const std::string& y_title, bool x_ticks = true) {
  svg += "<g class=\"axis\">\n";
  for (double v : p.y.ticks()) {
    const double y = p.py_of(v);
    svg += "<line class=\"grid\" x1=\"" + px(p.left) + "\" y1=\"" + px(y) + "\" x2=\"" +
           px(p.left + p.width) + "\" y2=\"" + px(y) + "\"/>";
    svg += "<text x=\"" + px(p.left - 6) + "\" y=\"" + px(y + 4) + "\" text-anchor=\"end\">" +
           p.y.label(v) + "</text>\n";
  }
  if (x_ticks) {
    for (double v : p.x.ticks()) {
      const double x = p.px_of(v);
      svg += "<line class=\"tick\" x1=\"" + px(x) + "\" y1=\"" + px(p.top + p.height) + "\" x2=\"" +
             px(x) + "\" y2=\"" + px(p.top + p.height + 5) + "\"/>";
      svg += "<text x=\"" + px(x) + "\" y=\"" + px(p.top + p.height + 18) +
             "\" text-anchor=\"middle\">" + p.x.label(v) + "</text>\n";
    }
  }
  svg += "<line class=\"frame\" x1=\"" + px(p.left) + "\" y1=\"" + px(p.top + p.height) +
         "\" x2=\"" + px(p.left + p.width) + "\" y2=\"" + px(p.top + p.height) + "\"/>";
  svg += "<line class=\"frame\" x1=\"" + px(p.left) + "\" y1=\"" + px(p.top) + "\" x2=\"" +
         px(p.left) + "\" y2=\"" + px(p.top + p.height) + "\"/>\n";
  svg += "<text class=\"title\" x=\"" + px(p.left + p.width / 2) + "\" y=\"" +
         px(p.top + p.height + 36) + "\" text-anchor=\"middle\">" + esc(x_title) + "</text>\n";
  const double yc = p.top + p.height / 2;
  svg += "<text class=\"title\" x=\"" + px(p.left - 46) + "\" y=\"" + px(yc) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 " + px(p.left - 46) + " " + px(yc) +
         ")\">" + esc(y_title) + "</text>\n";
  svg += "</g>\n";
}

struct LegendItem {
  std::string label;
  std::string color;
};

constexpr double kLegendRow = 20;

// Items laid out left to right from x, wrapped at x + max_width; the rows they need.
int legend_rows(const std::vector<LegendItem>& items, double max_width) {
  int rows = items.empty() ? 0 : 1;
  double at = 0;
  for (const LegendItem& item : items) {
    const double w = 26 + text_width(item.label) + 18;
    if (at > 0 && at + w > max_width) {
      ++rows;
      at = 0;
    }
    at += w;
  }
  return rows;
}

// A chart's plot area in an SVG `width` wide: `left`/`right` margins for the axes' labels,
// `rows` rows of legend above it, `height` tall.
Plot frame(double width, double left, double right, int rows, double height) {
  Plot p;
  p.left = left;
  p.width = width - left - right;
  p.top = 14 + rows * kLegendRow + 8;
  p.height = height;
  return p;
}

// The same with as many legend rows as `legend` takes over the plot's width.
Plot frame(double width, double left, double right, const std::vector<LegendItem>& legend,
           double height) {
  return frame(width, left, right, legend_rows(legend, width - left - right), height);
}

// The SVG's height around plot area `p` (room below for the x axis and its label).
double svg_height(const Plot& p) { return p.top + p.height + 48; }

// An x scale over [lo, hi] that starts at 0 or more; a lone value gets room to its right.
Scale x_scale(double lo, double hi, int ticks, bool integer) {
  return lo == hi ? nice_scale(std::max(0.0, lo - 1), hi + 1, ticks, integer)
                  : nice_scale(lo, hi, ticks, integer);
}

void draw_legend(std::string& svg, const std::vector<LegendItem>& items, double x, double y,
                 double max_width) {
  double at = 0;
  double row_y = y;
  svg += "<g class=\"legend\">\n";
  for (const LegendItem& item : items) {
    const double w = 26 + text_width(item.label) + 18;
    if (at > 0 && at + w > max_width) {
      at = 0;
      row_y += kLegendRow;
    }
    svg += "<line x1=\"" + px(x + at) + "\" y1=\"" + px(row_y) + "\" x2=\"" + px(x + at + 20) +
           "\" y2=\"" + px(row_y) + "\" stroke=\"" + item.color + "\" stroke-width=\"4\"/>";
    svg += "<text x=\"" + px(x + at + 26) + "\" y=\"" + px(row_y + 4) + "\">" + esc(item.label) +
           "</text>\n";
    at += w;
  }
  svg += "</g>\n";
}

// A process as the charts see it: its JSON and its colour (by its place among all processes, so
// a rank keeps its colour in every chart).
struct Lane {
  const json* process;
  std::string name;
  std::string color;
};

struct LossPoint {
  int generation;
  double epoch;
  double batch;
  double loss;
};

std::vector<LossPoint> loss_points(const json& process) {
  std::vector<LossPoint> out;
  for (const json& p : array(field(process, "loss"), "points")) {
    if (!p.is_array() || p.size() < 4 || !p[0].is_number() || !p[1].is_number() ||
        !p[2].is_number() || !p[3].is_number()) {
      continue;
    }
    const double loss = p[3].get<double>();
    if (!std::isfinite(loss)) continue;  // a diverged step: nothing to draw
    out.push_back({p[0].get<int>(), p[1].get<double>(), p[2].get<double>(), loss});
  }
  return out;
}

// The loss of every rank over the training: x is the batch when the whole curve lies in one
// epoch, else epoch + batch / batches-per-epoch (as the workers reported it, else the largest batch
// seen plus the log interval). A
// curve breaks where a generation starts (a restart runs epochs again); later generations dash.
// The batches per epoch the processes' runs reported (their first run that did), if any.
std::optional<double> said_batches_per_epoch(const std::vector<Lane>& lanes) {
  for (const Lane& lane : lanes) {
    for (const json& run : array(*lane.process, "runs")) {
      if (const auto b = number(field(run, "pace"), "batches_per_epoch")) return *b;
    }
  }
  return std::nullopt;
}

std::string loss_chart(const std::vector<Lane>& lanes) {
  struct Curve {
    const Lane* lane;
    std::vector<LossPoint> points;
  };
  std::vector<Curve> curves;
  double max_batch = 0;
  double interval = INFINITY;  // between progress lines: the trainer's log interval
  double min_epoch = INFINITY;
  double max_epoch = -INFINITY;
  double min_loss = INFINITY;
  double max_loss = -INFINITY;
  long long seen = 0;
  long long kept = 0;
  for (const Lane& lane : lanes) {
    Curve c{&lane, loss_points(*lane.process)};
    if (c.points.empty()) continue;
    for (std::size_t i = 0; i < c.points.size(); ++i) {
      const LossPoint& p = c.points[i];
      if (i > 0 && p.epoch == c.points[i - 1].epoch && p.batch > c.points[i - 1].batch) {
        interval = std::min(interval, p.batch - c.points[i - 1].batch);
      }
      max_batch = std::max(max_batch, p.batch);
      min_epoch = std::min(min_epoch, p.epoch);
      max_epoch = std::max(max_epoch, p.epoch);
      min_loss = std::min(min_loss, p.loss);
      max_loss = std::max(max_loss, p.loss);
    }
    seen += static_cast<long long>(number(field(*lane.process, "loss"), "seen").value_or(0));
    kept += static_cast<long long>(c.points.size());
    curves.push_back(std::move(c));
  }
  if (curves.empty()) return {};
  const bool one_epoch = min_epoch == max_epoch;
  // As the workers said ("epoch E B" on DDL_PROGRESS_FD); else estimated: the last progress line
  // of an epoch comes up to one log interval before its end.
  const std::optional<double> said = said_batches_per_epoch(lanes);
  const double per_epoch = said ? *said : max_batch + (std::isfinite(interval) ? interval : 1);
  auto x_of = [&](const LossPoint& p) {
    return one_epoch ? p.batch : p.epoch + p.batch / per_epoch;
  };
  double min_x = INFINITY;
  double max_x = -INFINITY;
  for (const Curve& c : curves) {
    for (const LossPoint& p : c.points) {
      min_x = std::min(min_x, x_of(p));
      max_x = std::max(max_x, x_of(p));
    }
  }

  std::vector<LegendItem> legend;
  for (const Curve& c : curves) legend.push_back({c.lane->name, c.lane->color});
  const double width = 1100;
  Plot p = frame(width, 70, 24, legend, 300);
  const double height = svg_height(p);
  // Batches and epochs count from 0: a lone point gets room to its right, not a negative axis.
  p.x = x_scale(min_x, max_x, 10, one_epoch);
  p.y = nice_scale(std::min(0.0, min_loss), max_loss, 6, false);

  std::string svg = svg_open(width, height, "loss per rank");
  draw_legend(svg, legend, p.left, 18, p.width);
  const std::string x_title =
      one_epoch ? "batch (epoch " + fixed(min_epoch, 0) + ")"
                : "epoch (fractional: batch / " + fixed(per_epoch, 0) + " batches per epoch)";
  draw_axes(svg, p, x_title, "loss");
  for (const Curve& c : curves) {
    const int first_generation = c.points.front().generation;
    std::size_t begin = 0;
    while (begin < c.points.size()) {
      std::size_t end = begin + 1;
      while (end < c.points.size() && c.points[end].generation == c.points[begin].generation &&
             x_of(c.points[end]) >= x_of(c.points[end - 1])) {
        ++end;
      }
      const bool restarted = c.points[begin].generation != first_generation;
      const std::string dash = restarted ? " stroke-dasharray=\"7 4\"" : "";
      if (end - begin == 1) {
        svg += "<circle cx=\"" + px(p.px_of(x_of(c.points[begin]))) + "\" cy=\"" +
               px(p.py_of(c.points[begin].loss)) + "\" r=\"4\" fill=\"" + c.lane->color + "\"/>\n";
      } else {
        svg += "<polyline class=\"series\" data-name=\"" + esc(c.lane->name) + "\" stroke=\"" +
               c.lane->color + "\"" + dash + " points=\"";
        for (std::size_t i = begin; i < end; ++i) {
          svg += px(p.px_of(x_of(c.points[i]))) + "," + px(p.py_of(c.points[i].loss)) + " ";
        }
        svg.back() = '"';
        svg += "><title>" + esc(c.lane->name) + ", generation " +
               std::to_string(c.points[begin].generation) + "</title></polyline>\n";
      }
      begin = end;
    }
  }
  svg += "</svg>\n";
  std::string note = "One point per progress line";
  if (kept < seen) {
    note += strf(" (%lld of %lld lines kept: the report thins long curves evenly)", kept, seen);
  }
  note += "; dashed: after a restart.";
  return "<figure class=\"wide\"><figcaption>Training loss</figcaption>\n" + svg +
         "<p class=\"note\">" + esc(note) + "</p></figure>\n";
}

// Each rank's own time per step (the step minus its time waiting for the other ranks; from the
// steps it reported on DDL_PROGRESS_FD), over the steps: a straggler is the line above the others.
// A curve breaks where a generation starts; later generations dash.
std::string step_time_chart(const std::vector<Lane>& lanes) {
  struct Point {
    int generation;
    double step;
    double ms;
  };
  struct Curve {
    const Lane* lane;
    std::vector<Point> points;
  };
  std::vector<Curve> curves;
  double min_x = INFINITY, max_x = -INFINITY, max_y = 0;
  for (const Lane& lane : lanes) {
    Curve c{&lane, {}};
    for (const json& p : array(field(*lane.process, "step_times"), "points")) {
      if (!p.is_array() || p.size() < 3 || !p[0].is_number() || !p[1].is_number() ||
          !p[2].is_number() || !std::isfinite(p[2].get<double>())) {
        continue;
      }
      c.points.push_back({p[0].get<int>(), p[1].get<double>(), p[2].get<double>() * 1000});
      min_x = std::min(min_x, c.points.back().step);
      max_x = std::max(max_x, c.points.back().step);
      max_y = std::max(max_y, c.points.back().ms);
    }
    if (!c.points.empty()) curves.push_back(std::move(c));
  }
  if (curves.empty()) return {};
  std::vector<LegendItem> legend;
  for (const Curve& c : curves) legend.push_back({c.lane->name, c.lane->color});
  const double width = 1100;
  Plot p = frame(width, 70, 24, legend, 240);
  const double height = svg_height(p);
  p.x = x_scale(min_x, max_x, 10, true);
  p.y = nice_scale(0, max_y * 1.05, 6, false);
  std::string svg = svg_open(width, height, "own time per step per rank");
  draw_legend(svg, legend, p.left, 18, p.width);
  draw_axes(svg, p, "step", "own time per step (ms)");
  for (const Curve& c : curves) {
    const int first_generation = c.points.front().generation;
    std::size_t begin = 0;
    while (begin < c.points.size()) {
      std::size_t end = begin + 1;
      while (end < c.points.size() && c.points[end].generation == c.points[begin].generation &&
             c.points[end].step >= c.points[end - 1].step) {
        ++end;
      }
      const std::string dash =
          c.points[begin].generation != first_generation ? " stroke-dasharray=\"7 4\"" : "";
      svg += "<polyline class=\"series\" data-name=\"" + esc(c.lane->name) + "\" stroke=\"" +
             c.lane->color + "\"" + dash + " points=\"";
      for (std::size_t i = begin; i < end; ++i) {
        svg += px(p.px_of(c.points[i].step)) + "," + px(p.py_of(c.points[i].ms)) + " ";
      }
      svg.back() = '"';
      svg += "><title>" + esc(c.lane->name) + ", generation " +
             std::to_string(c.points[begin].generation) + "</title></polyline>\n";
      begin = end;
    }
  }
  svg += "</svg>\n";
  return "<figure class=\"wide\"><figcaption>Own time per step</figcaption>\n" + svg +
         "<p class=\"note\">From the steps each rank reported (DDL_PROGRESS_FD): the step minus "
         "its time waiting for the other ranks; a straggler is the line above the others. Long "
         "runs are thinned evenly; dashed: after a restart.</p></figure>\n";
}

// The test accuracy after each epoch; when a restart ran an epoch again, its latest generation's
// figure. Ranks usually agree exactly (they hold the same parameters), so earlier ranks are drawn
// wider underneath later ones and every rank stays visible.
std::string accuracy_chart(const std::vector<Lane>& lanes) {
  struct Curve {
    const Lane* lane;
    std::map<double, std::pair<int, double>> by_epoch;  // epoch -> (generation, accuracy %)
  };
  std::vector<Curve> curves;
  for (const Lane& lane : lanes) {
    Curve c{&lane, {}};
    for (const json& e : array(*lane.process, "epochs")) {
      const auto accuracy = number(e, "accuracy");
      const auto epoch = number(e, "epoch");
      if (!accuracy || !epoch) continue;
      const int generation = static_cast<int>(number(e, "generation").value_or(0));
      auto found = c.by_epoch.find(*epoch);
      if (found == c.by_epoch.end() || found->second.first <= generation) {
        c.by_epoch[*epoch] = {generation, *accuracy * 100};
      }
    }
    if (!c.by_epoch.empty()) curves.push_back(std::move(c));
  }
  if (curves.empty()) return {};
  double min_x = INFINITY, max_x = -INFINITY, min_y = INFINITY, max_y = -INFINITY;
  std::vector<LegendItem> legend;
  for (const Curve& c : curves) {
    for (const auto& [epoch, value] : c.by_epoch) {
      min_x = std::min(min_x, epoch);
      max_x = std::max(max_x, epoch);
      min_y = std::min(min_y, value.second);
      max_y = std::max(max_y, value.second);
    }
    legend.push_back(
        {c.lane->name + " " + fixed(c.by_epoch.rbegin()->second.second, 2) + "%", c.lane->color});
  }
  const double width = 540;
  Plot p = frame(width, 64, 20, legend, 220);
  const double height = svg_height(p);
  p.x = x_scale(min_x, max_x, 8, true);
  const double pad = std::max(0.5, (max_y - min_y) * 0.15);
  p.y = nice_scale(std::max(0.0, min_y - pad), std::min(100.0, max_y + pad), 5, false);

  std::string svg = svg_open(width, height, "test accuracy per epoch");
  draw_legend(svg, legend, p.left, 18, p.width);
  draw_axes(svg, p, "epoch", "test accuracy (%)");
  const double n = static_cast<double>(curves.size());
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const Curve& c = curves[i];
    const double under = n > 1 ? (n - 1 - static_cast<double>(i)) / (n - 1) : 0;  // 1 first
    const double stroke = 2 + 3 * under;
    const double radius = 3.5 + 2.5 * under;
    std::string points;
    for (const auto& [epoch, value] : c.by_epoch) {
      points += px(p.px_of(epoch)) + "," + px(p.py_of(value.second)) + " ";
    }
    points.pop_back();
    if (c.by_epoch.size() > 1) {
      svg += "<polyline class=\"series\" data-name=\"" + esc(c.lane->name) + "\" stroke=\"" +
             c.lane->color + "\" stroke-width=\"" + px(stroke) + "\" points=\"" + points + "\"/>\n";
    }
    for (const auto& [epoch, value] : c.by_epoch) {
      svg += "<circle cx=\"" + px(p.px_of(epoch)) + "\" cy=\"" + px(p.py_of(value.second)) +
             "\" r=\"" + px(radius) + "\" fill=\"" + c.lane->color + "\"><title>" +
             esc(c.lane->name) + ", epoch " + fixed(epoch, 0) + ": " + fixed(value.second, 2) +
             "%</title></circle>\n";
    }
  }
  svg += "</svg>\n";
  return "<figure><figcaption>Test accuracy</figcaption>\n" + svg + "</figure>\n";
}

// Each rank's mean images/s over its epochs, as bars.
std::string throughput_chart(const std::vector<Lane>& lanes) {
  std::vector<std::pair<const Lane*, double>> bars;
  double top = 0;
  double total = 0;
  for (const Lane& lane : lanes) {
    const auto rate = number(*lane.process, "mean_images_per_sec");
    if (!rate) continue;
    bars.emplace_back(&lane, *rate);
    top = std::max(top, *rate);
    total += *rate;
  }
  if (bars.empty()) return {};
  const double width = 540;
  // Level with the accuracy chart beside it (one legend row).
  Plot p = frame(width, 64, 20, 1, 220);
  const double height = svg_height(p);
  p.y = nice_scale(0, top * 1.12, 5, false);
  p.x = Scale{0, static_cast<double>(bars.size()), 1};

  std::string svg = svg_open(width, height, "images per second per rank");
  draw_axes(svg, p, "", "images/s (mean over epochs)", false);
  const double slot = p.width / static_cast<double>(bars.size());
  const double bar = std::min(80.0, slot * 0.7);
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const auto& [lane, rate] = bars[i];
    const double cx = p.left + slot * (static_cast<double>(i) + 0.5);
    const double y = p.py_of(rate);
    svg += "<rect class=\"bar\" data-name=\"" + esc(lane->name) + "\" x=\"" + px(cx - bar / 2) +
           "\" y=\"" + px(y) + "\" width=\"" + px(bar) + "\" height=\"" + px(p.top + p.height - y) +
           "\" fill=\"" + lane->color + "\"><title>" + esc(lane->name) + ": " + thousands(rate) +
           " images/s</title></rect>\n";
    if (slot > 44) {
      svg += "<text class=\"value\" x=\"" + px(cx) + "\" y=\"" + px(y - 5) +
             "\" text-anchor=\"middle\">" + thousands(rate) + "</text>\n";
    }
    svg += "<text class=\"axis-label\" x=\"" + px(cx) + "\" y=\"" + px(p.top + p.height + 18) +
           "\" text-anchor=\"middle\">" + esc(lane->name) + "</text>\n";
  }
  svg += "</svg>\n";
  return "<figure><figcaption>Throughput (this node: " + thousands(total) +
         " images/s)</figcaption>\n" + svg + "</figure>\n";
}

std::string outcome_color(const json& outcome) {
  if (!outcome.is_string()) return kGrey;
  const std::string text = outcome.get<std::string>();
  if (text.rfind("succeeded", 0) == 0) return kGreen;
  if (text.rfind("restart", 0) == 0) return kOrange;
  return kRed;
}

std::string exit_color(const json& exit) {
  if (!exit.is_object()) return kGrey;
  if (field(exit, "signal").is_number()) return kOrange;
  return number(exit, "code").value_or(1) == 0 ? kGreen : kRed;
}

// Generations as bars over the job's time, then one lane per process with a bar per run.
std::string timeline(const json& report) {
  const json& job = field(report, "job");
  const json& generations = array(report, "generations");
  const json& processes = array(report, "processes");
  double t0 = INFINITY;
  double t1 = -INFINITY;
  auto consider = [&](const json& j) {
    for (const char* key : {"start_ms", "end_ms"}) {
      if (auto v = number(j, key)) {
        t0 = std::min(t0, *v);
        t1 = std::max(t1, *v);
      }
    }
  };
  consider(job);
  for (const json& g : generations) consider(g);
  for (const json& proc : processes) {
    for (const json& r : array(proc, "runs")) consider(r);
  }
  if (!std::isfinite(t0)) return "<p class=\"empty\">No times were recorded.</p>\n";
  if (t1 - t0 < 1) t1 = t0 + 1;
  const double open_end = number(job, "end_ms").value_or(t1);

  const double width = 1100;
  const double gen_row = 26;
  const double lane_row = 20;
  Plot p;
  p.left = 130;
  p.width = width - p.left - 24;
  p.top = 10;
  const double lanes_top = p.top + static_cast<double>(generations.size()) * gen_row + 10;
  p.height = lanes_top - p.top + static_cast<double>(processes.size()) * lane_row;
  const double height = p.top + p.height + 48 + kLegendRow + 8;
  p.x = nice_scale(0, (t1 - t0) / 1000, 10, false);
  p.y = Scale{0, 1, 1};
  auto x_at = [&](double ms) { return p.px_of((ms - t0) / 1000); };

  std::string svg = svg_open(width, height, "timeline of generations and processes");
  svg += "<g class=\"axis\">\n";
  for (double v : p.x.ticks()) {
    const double x = p.px_of(v);
    svg += "<line class=\"grid\" x1=\"" + px(x) + "\" y1=\"" + px(p.top) + "\" x2=\"" + px(x) +
           "\" y2=\"" + px(p.top + p.height) + "\"/>";
    svg += "<text x=\"" + px(x) + "\" y=\"" + px(p.top + p.height + 18) +
           "\" text-anchor=\"middle\">" + p.x.label(v) + "</text>\n";
  }
  svg += "<line class=\"frame\" x1=\"" + px(p.left) + "\" y1=\"" + px(p.top + p.height) +
         "\" x2=\"" + px(p.left + p.width) + "\" y2=\"" + px(p.top + p.height) + "\"/>\n";
  svg += "<text class=\"title\" x=\"" + px(p.left + p.width / 2) + "\" y=\"" +
         px(p.top + p.height + 36) + "\" text-anchor=\"middle\">seconds since " +
         esc(clock_text(t0)) + "</text>\n</g>\n";

  double y = p.top;
  for (const json& g : generations) {
    const std::string name = "generation " + text(g, "generation");
    const double start = number(g, "start_ms").value_or(t0);
    const double end = number(g, "end_ms").value_or(open_end);
    const double x0 = x_at(start);
    const double w = std::max(2.0, x_at(end) - x0);
    const std::string outcome = text(g, "outcome", "running");
    svg += "<text class=\"lane\" x=\"" + px(p.left - 8) + "\" y=\"" + px(y + gen_row / 2 + 2) +
           "\" text-anchor=\"end\">" + esc(name) + "</text>\n";
    svg += "<rect class=\"generation\" x=\"" + px(x0) + "\" y=\"" + px(y + 3) + "\" width=\"" +
           px(w) + "\" height=\"" + px(gen_row - 6) + "\" rx=\"3\" fill=\"" +
           outcome_color(field(g, "outcome")) + "\"><title>" + esc(name) + ": " + esc(outcome) +
           " (" + duration_text((end - start) / 1000) + ")</title></rect>\n";
    const std::string label = esc(outcome);
    if (text_width(outcome, 11) + 12 < w) {
      svg += "<text class=\"inbar\" x=\"" + px(x0 + 6) + "\" y=\"" + px(y + gen_row / 2 + 4) +
             "\">" + label + "</text>\n";
    } else if (x0 + w + 6 + text_width(outcome, 11) < width) {
      svg += "<text class=\"outbar\" x=\"" + px(x0 + w + 6) + "\" y=\"" + px(y + gen_row / 2 + 4) +
             "\">" + label + "</text>\n";
    }
    y += gen_row;
  }
  y = lanes_top;
  svg += "<line class=\"separator\" x1=\"" + px(8) + "\" y1=\"" + px(y - 5) + "\" x2=\"" +
         px(p.left + p.width) + "\" y2=\"" + px(y - 5) + "\"/>\n";
  for (const json& proc : processes) {
    const std::string name = text(proc, "name");
    svg += "<text class=\"lane\" x=\"" + px(p.left - 8) + "\" y=\"" + px(y + lane_row / 2 + 4) +
           "\" text-anchor=\"end\">" + esc(name) + "</text>\n";
    for (const json& r : array(proc, "runs")) {
      const auto start_ms = number(r, "start_ms");
      const double start = start_ms.value_or(t0);
      const double end = number(r, "end_ms").value_or(open_end);
      const double x0 = x_at(start);
      const double w = std::max(2.0, x_at(end) - x0);
      const json& exit = field(r, "exit");
      svg += "<rect class=\"run\" x=\"" + px(x0) + "\" y=\"" + px(y + 4) + "\" width=\"" + px(w) +
             "\" height=\"" + px(lane_row - 8) + "\" rx=\"2\" fill=\"" + exit_color(exit) +
             "\"><title>" + esc(name) + ", generation " + text(r, "generation") + ", pid " +
             text(r, "pid") + ": " + esc(text(exit, "text", "still running")) + " after " +
             duration_text((end - start) / 1000) + "</title></rect>\n";
    }
    y += lane_row;
  }
  const std::vector<LegendItem> legend = {{"succeeded / exit code 0", kGreen},
                                          {"restarted / killed by a signal", kOrange},
                                          {"failed / non-zero exit code", kRed},
                                          {"running or unknown", kGrey}};
  draw_legend(svg, legend, p.left, p.top + p.height + 58, p.width);
  svg += "</svg>\n";
  return svg;
}

// --- tables -----------------------------------------------------------------------------------

std::string time_cell(const json& j, const char* key) {
  const auto ms = number(j, key);
  return ms ? esc(clock_text(*ms)) : "-";
}

std::string generations_table(const json& report) {
  std::string html =
      "<table class=\"data\"><thead><tr><th>generation</th><th>world size</th><th>start</th>"
      "<th>end</th><th class=\"num\">duration</th><th>outcome</th></tr></thead><tbody>\n";
  for (const json& g : array(report, "generations")) {
    const auto duration = number(g, "duration_s");
    html +=
        "<tr><td>" + esc(text(g, "generation")) + "</td><td>" + esc(text(g, "world_size")) +
        "</td><td>" + time_cell(g, "start_ms") + "</td><td>" + time_cell(g, "end_ms") +
        "</td><td class=\"num\">" + (duration ? esc(duration_text(*duration)) : "-") +
        "</td><td><span class=\"dot\" style=\"background:" + outcome_color(field(g, "outcome")) +
        "\"></span>" + esc(text(g, "outcome", "running")) + "</td></tr>\n";
  }
  return html + "</tbody></table>\n";
}

// Start-up by phase in the first generation: per process, seconds from the generation's start to
// each phase it reached (spawn, the phases its runtime reported, its first step); the slowest per
// phase in bold. Empty when no run of generation 0 has a start-up record.
std::string startup_table(const json& report) {
  std::vector<std::string> phases = {"spawn"};
  std::vector<std::pair<std::string, const json*>> rows;
  for (const json& proc : array(report, "processes")) {
    for (const json& run : array(proc, "runs")) {
      const json& startup = field(run, "startup");
      if (text(run, "generation") != "0" || !startup.is_object()) continue;
      rows.emplace_back(text(proc, "name"), &startup);
      for (const auto& [key, value] : startup.items()) {
        const std::string phase = key.substr(0, key.size() - 2);
        if (phase != "first_step" &&
            std::find(phases.begin(), phases.end(), phase) == phases.end()) {
          phases.push_back(phase);
        }
      }
    }
  }
  if (rows.empty()) return "";
  // The reported phases in the order they were reached (by their earliest time).
  auto earliest = [&](const std::string& phase) {
    double t = INFINITY;
    for (const auto& row : rows)
      t = std::min(t, number(*row.second, (phase + "_s").c_str()).value_or(INFINITY));
    return t;
  };
  std::stable_sort(
      phases.begin() + 1, phases.end(),
      [&](const std::string& x, const std::string& y) { return earliest(x) < earliest(y); });
  phases.push_back("first_step");
  json slowest;
  for (const json& g : array(report, "generations")) {
    if (text(g, "generation") == "0") slowest = field(g, "startup");
  }
  std::string html = "<table class=\"data\"><thead><tr><th>process</th>";
  for (const std::string& p : phases) {
    html += "<th class=\"num\">" + esc(p == "first_step" ? "first step" : p) + "</th>";
  }
  html += "</tr></thead><tbody>\n";
  for (const auto& [name, startup] : rows) {
    html += "<tr><td>" + esc(name) + "</td>";
    for (const std::string& p : phases) {
      const auto s = number(*startup, (p + "_s").c_str());
      const bool worst =
          s && slowest.is_object() && slowest.contains(p) && text(slowest[p], "process") == name;
      const std::string cell = s ? esc(fixed(*s, 3)) + " s" : "-";
      html += "<td class=\"num\">" + (worst ? "<strong>" + cell + "</strong>" : cell) + "</td>";
    }
    html += "</tr>\n";
  }
  return html +
         "</tbody></table>\n<p class=\"note\">Seconds from the first generation's start; the "
         "slowest process of each phase in bold. Phases after spawn are those its runtime "
         "reported on DDL_PROGRESS_FD.</p>\n";
}

// The pre-flight checks (--preflight): per generation, each node's matmul rate and best links; a
// named node's row says why, in bold.
std::string preflight_table(const json& report) {
  std::string html;
  for (const json& c : array(report, "preflight")) {
    const auto seconds = number(c, "seconds");
    html += "<p>Generation " + esc(text(c, "generation")) + " (" +
            (seconds ? esc(fixed(*seconds, 2)) + " s" : std::string("-")) +
            "): " + esc(text(c, "outcome")) + "</p>\n";
    html +=
        "<table class=\"data\"><thead><tr><th>node</th><th class=\"num\">matmul GFLOP/s</th>"
        "<th class=\"num\">best link out MB/s</th><th class=\"num\">best link in MB/s</th>"
        "<th>named</th></tr></thead><tbody>\n";
    for (const json& n : array(c, "nodes")) {
      auto cell = [&](const char* key) {
        const auto v = number(n, key);
        return v ? esc(fixed(*v, *v >= 100 ? 0 : 2)) : std::string("failed");
      };
      const std::string named = text(n, "named", "");
      html += "<tr><td>" + esc(text(n, "node")) + "</td><td class=\"num\">" + cell("gflops") +
              "</td><td class=\"num\">" + cell("best_out_mbs") + "</td><td class=\"num\">" +
              cell("best_in_mbs") + "</td><td>" +
              (named.empty() ? std::string("-") : "<strong>" + esc(named) + "</strong>") +
              "</td></tr>\n";
    }
    html += "</tbody></table>\n";
  }
  return html;
}

std::string process_table(const json& report) {
  std::string html =
      "<table class=\"data\" id=\"processes\"><thead><tr><th>process</th><th>generations</th>"
      "<th>pid</th><th>exit</th><th class=\"num\">lines</th><th class=\"num\">peak RSS</th>"
      "<th class=\"num\">CPU time</th><th class=\"num\">mean images/s</th>"
      "<th class=\"num\">last accuracy</th></tr></thead><tbody>\n";
  std::string warnings;
  for (const json& proc : array(report, "processes")) {
    std::string gens;
    for (const json& g : array(proc, "generations")) gens += (gens.empty() ? "" : ", ") + g.dump();
    const json& runs = array(proc, "runs");
    const std::string pid = runs.empty() ? "-" : text(runs.back(), "pid");
    const json& exit = field(proc, "exit");
    const auto rss = number(proc, "peak_rss_kib");
    const auto cpu = number(proc, "cpu_seconds");
    const auto rate = number(proc, "mean_images_per_sec");
    std::optional<double> accuracy;
    for (const json& e : array(proc, "epochs")) {
      if (auto a = number(e, "accuracy")) accuracy = a;
    }
    html += "<tr><td class=\"name\">" + esc(text(proc, "name")) + "</td><td>" + esc(gens) +
            "</td><td>" + esc(pid) +
            "</td><td><span class=\"dot\" style=\"background:" + exit_color(exit) + "\"></span>" +
            esc(text(exit, "text", "still running")) + "</td><td class=\"num\">" +
            thousands(number(proc, "lines").value_or(0)) + "</td><td class=\"num\">" +
            (rss && *rss > 0 ? esc(size_text(*rss)) : "-") + "</td><td class=\"num\">" +
            (cpu ? esc(strf("%.2f s", *cpu)) : "-") + "</td><td class=\"num\">" +
            (rate ? thousands(*rate) : "-") + "</td><td class=\"num\">" +
            (accuracy ? fixed(*accuracy * 100, 2) + "%" : "-") + "</td></tr>\n";
    const double malformed = number(proc, "malformed_metric_lines").value_or(0);
    if (malformed > 0) {
      warnings += "<li>" + esc(text(proc, "name")) + ": " + thousands(malformed) +
                  " line(s) began with \"epoch: \" but matched no metric format.</li>\n";
    }
    const double dropped = number(proc, "dropped_epoch_lines").value_or(0);
    if (dropped > 0) {
      warnings += "<li>" + esc(text(proc, "name")) + ": " + thousands(dropped) +
                  " metric line(s) of epochs past the report's limit were not kept.</li>\n";
    }
  }
  html += "</tbody></table>\n";
  if (!warnings.empty()) html += "<ul class=\"warnings\">\n" + warnings + "</ul>\n";
  return html;
}

constexpr const char* kStyle = R"(
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f4f5f7; color: #1d2330;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1148px; margin: 0 auto; padding: 20px 16px 40px; }
header.job { background: #1d2a3f; color: #fff; border-radius: 8px; padding: 18px 22px; }
header.job h1 { margin: 0 0 10px; font-size: 22px; font-weight: 600; }
header.job h1 .id { color: #9fc3ff; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 12px; font-weight: 600;
  font-size: 13px; margin-left: 10px; vertical-align: middle; }
.badge.ok { background: #3a9d4f; } .badge.fail { background: #d64545; }
.badge.open { background: #777; }
dl.facts { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 4px 16px;
  margin: 0; }
dl.facts dt { color: #aab6c8; } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
dl.facts dd.wide { grid-column: 2 / 5; }
section { background: #fff; border-radius: 8px; margin-top: 16px; padding: 14px 18px 18px;
  box-shadow: 0 1px 2px rgba(0,0,0,.08); }
h2 { font-size: 17px; margin: 0 0 10px; font-weight: 600; }
table.data { border-collapse: collapse; width: 100%; font-size: 13px; }
table.data th { text-align: left; font-weight: 600; color: #4a5568; border-bottom: 2px solid #dde1e7;
  padding: 6px 8px; white-space: nowrap; }
table.data td { padding: 5px 8px; border-bottom: 1px solid #edf0f3; }
table.data tbody tr:nth-child(even) { background: #f8f9fb; }
table.data .num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.data td.name { font-weight: 600; white-space: nowrap; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 6px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; justify-content: space-between; }
figure { margin: 0; flex: 1 1 480px; min-width: 0; max-width: 100%; }
figure.wide { flex-basis: 100%; }
figcaption { font-weight: 600; color: #4a5568; margin: 4px 0 2px; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
  fill: #3b4453; }
svg .axis text { fill: #5f6b7a; font-size: 11px; } svg .axis text.title { font-size: 12px; fill: #3b4453; }
svg .grid { stroke: #e8ebef; } svg .tick, svg .frame { stroke: #9aa4b1; }
svg .separator { stroke: #d5dae1; stroke-dasharray: 3 3; }
svg polyline.series { fill: none; stroke-width: 2; stroke-linejoin: round; stroke-linecap: round; }
svg text.inbar { fill: #fff; font-size: 11px; font-weight: 600; }
svg text.outbar { font-size: 11px; } svg text.lane { font-size: 12px; }
svg text.value { font-size: 11px; font-weight: 600; }
p.note { color: #6b7685; font-size: 12px; margin: 2px 0 0; }
p.empty { color: #6b7685; font-style: italic; margin: 6px 0; }
ul.warnings { color: #9a5b00; font-size: 13px; margin: 8px 0 0; }
footer { color: #8a94a3; font-size: 12px; margin-top: 14px; text-align: center; }
)";

}  // namespace

std::string html_escape(std::string_view in) {
  static constexpr const char* kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(in.size() + in.size() / 8);
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  const std::size_t n = in.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        case '\'':
          out += "&#39;";
          break;
        case '\t':
        case '\n':
          out += static_cast<char>(c);
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            out += kReplacement;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // A multi-byte sequence: the lead byte says its length; the second byte's range excludes
    // overlong forms, UTF-16 surrogates and code points past U+10FFFF.
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    }
    bool valid = length > 0 && i + length <= n && s[i + 1] >= low && s[i + 1] <= high;
    for (std::size_t k = 2; valid && k < length; ++k) valid = s[i + k] >= 0x80 && s[i + k] <= 0xBF;
    if (valid) {
      out.append(in.data() + i, length);
      i += length;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

std::string render_report_html(const json& report) {
  const json& job = field(report, "job");
  const json& processes = array(report, "processes");
  const std::string job_id = text(job, "job_id");

  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>Run report: job " + esc(job_id) + "</title>\n<style>" + kStyle +
          "</style>\n</head>\n<body>\n<main>\n";

  // Header.
  const auto exit_code = number(job, "exit_code");
  const std::string badge = exit_code ? strf("<span class=\"badge %s\">exit code %.0f</span>",
                                             *exit_code == 0 ? "ok" : "fail", *exit_code)
                                      : "<span class=\"badge open\">running</span>";
  const auto duration = number(job, "duration_s");
  html += "<header class=\"job\">\n<h1>Run report: job <span class=\"id\">" + esc(job_id) +
          "</span>" + badge + "</h1>\n<dl class=\"facts\">\n";
  html += "<dt>worker</dt><dd>" + esc(text(job, "worker")) + "</dd>";
  html += "<dt>node</dt><dd>" + esc(text(job, "node_rank")) + " of " + esc(text(job, "nnodes")) +
          " (this report covers this node's processes)</dd>\n";
  html += "<dt>started</dt><dd>" + time_cell(job, "start_ms") + "</dd>";
  html += "<dt>ended</dt><dd>" + time_cell(job, "end_ms") +
          (duration ? " (" + esc(duration_text(*duration)) + ")" : "") + "</dd>\n";
  html += "<dt>generations</dt><dd>" + std::to_string(array(report, "generations").size()) +
          "</dd><dt>processes</dt><dd>" + std::to_string(processes.size()) + "</dd>\n";
  html += "<dt>summary</dt><dd class=\"wide\">" + esc(text(job, "summary", "-")) + "</dd>\n";
  html += "</dl>\n</header>\n";

  html += "<section><h2>Processes</h2>\n" + process_table(report) + "</section>\n";

  std::vector<Lane> lanes;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    lanes.push_back({&processes[i], text(processes[i], "name"), color_of(i)});
  }
  const std::string loss = loss_chart(lanes);
  const std::string accuracy = accuracy_chart(lanes);
  const std::string throughput = throughput_chart(lanes);
  const std::string step_times = step_time_chart(lanes);
  html += "<section><h2>Training</h2>\n";
  if (loss.empty() && accuracy.empty() && throughput.empty() && step_times.empty()) {
    html +=
        "<p class=\"empty\">No training metrics in the output (no line of the form "
        "\"epoch: E, batch: B, loss is: [L]\", \"epoch: E, test accuracy: ...\" or "
        "\"epoch: E, mean loss: L, images/s: R\").</p>\n";
  } else {
    html += "<div class=\"charts\">\n" + loss + accuracy + throughput + step_times + "</div>\n";
  }
  html += "</section>\n";

  if (const std::string startup = startup_table(report); !startup.empty()) {
    html += "<section><h2>Start-up by phase</h2>\n" + startup + "</section>\n";
  }
  const json& stragglers = array(report, "stragglers");
  if (!stragglers.empty()) {
    html += "<section><h2>Stragglers</h2>\n<ul>\n";
    for (const json& e : stragglers) {
      html += "<li>" + time_cell(e, "at_ms") + " " + esc(text(e, "line")) + "</li>\n";
    }
    html += "</ul>\n</section>\n";
  }
  if (const std::string checks = preflight_table(report); !checks.empty()) {
    html += "<section><h2>Pre-flight checks</h2>\n" + checks + "</section>\n";
  }
  html += "<section><h2>Timeline</h2>\n" + timeline(report) + generations_table(report) +
          "</section>\n";
  html +=
      "<footer>Written by ddlaunch's launch; report.json beside this page holds the same "
      "data.</footer>\n</main>\n</body>\n</html>\n";
  return html;
}

}  // namespace ddl::launcher
