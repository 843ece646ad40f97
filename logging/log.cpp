#include "logging/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <mutex>

#include "logging/safe_open.h"

namespace ddl::logging {
namespace {

// Appends each formatted line to a descriptor opened by open_for_writing (spdlog's own file sinks
// open by name and would follow a link planted there). Owns the descriptor.
class DescriptorSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit DescriptorSink(int fd) : fd_(fd) {}
  ~DescriptorSink() override { ::close(fd_); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* data = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses log lines, not the job (as spdlog's file sink)
      data += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}  // every line is written at once, unbuffered

 private:
  int fd_;
};

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
    case spdlog::level::trace:
      return 5;
    case spdlog::level::debug:
      return 10;
    case spdlog::level::info:
      return 20;
    case spdlog::level::warn:
      return 30;
    case spdlog::level::err:
      return 40;
    case spdlog::level::critical:
      return 50;
    default:
      return 0;
  }
}

std::string rank_role(int rank) { return "rank " + std::to_string(rank); }

void init(std::string_view role, spdlog::level::level_enum level) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  // stderr, unbuffered per line: workers' stderr is a pipe to the launcher, which relies on
  // whole lines arriving promptly.
  auto logger =
      std::make_shared<spdlog::logger>("ddl", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  line_pattern() =
      "[%Y-%m-%d %H:%M:%S.%e] [%l] [" + std::string(host) + " " + std::string(role) + "] %v";
  logger->set_pattern(line_pattern());
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
}

namespace {
int open_copy(const std::string& path) {
  std::string why;
  const int fd = open_for_writing(path, WriteMode::kAppend, why);
  if (fd < 0) throw spdlog::spdlog_ex(why);
  return fd;
}
}  // namespace

FileCopy::FileCopy(const std::string& path)
    : sink_(std::make_shared<DescriptorSink>(open_copy(path))) {
  if (!line_pattern().empty()) sink_->set_pattern(line_pattern());
  spdlog::default_logger()->sinks().push_back(sink_);
}

FileCopy::~FileCopy() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

}  // namespace ddl::logging
