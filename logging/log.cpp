#include "logging/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace ddl::logging {
namespace {

// The line format init() gave the default logger ("" before init: spdlog's own).
std::string& line_pattern() {
  static std::string pattern;
  return pattern;
}

}  // namespace

spdlog::level::level_enum parse_level(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "debug" || t == "10") return spdlog::level::debug;
  if (t == "info" || t == "20") return spdlog::level::info;
  if (t == "warn" || t == "warning" || t == "30") return spdlog::level::warn;
  if (t == "error" || t == "40") return spdlog::level::err;
  throw std::invalid_argument("bad log level '" + std::string(text) +
                              "': expected debug, info, warn, error or 10, 20, 30, 40");
}

int paddle_level(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return 5;
    case spdlog::level::debug: return 10;
    case spdlog::level::info: return 20;
    case spdlog::level::warn: return 30;
    case spdlog::level::err: return 40;
    case spdlog::level::critical: return 50;
    default: return 0;
  }
}

std::string rank_role(int rank) { return "rank " + std::to_string(rank); }

void init(std::string_view role, spdlog::level::level_enum level) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  // stderr, unbuffered per line: workers' stderr is a pipe to the launcher, which relies on
  // whole lines arriving promptly.
  auto logger = std::make_shared<spdlog::logger>(
      "ddl", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  line_pattern() =
      "[%Y-%m-%d %H:%M:%S.%e] [%l] [" + std::string(host) + " " + std::string(role) + "] %v";
  logger->set_pattern(line_pattern());
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
}

FileCopy::FileCopy(const std::string& path)
    : sink_(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false)) {
  if (!line_pattern().empty()) sink_->set_pattern(line_pattern());
  spdlog::default_logger()->sinks().push_back(sink_);
}

FileCopy::~FileCopy() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

}  // namespace ddl::logging
