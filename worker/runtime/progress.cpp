#include "worker/runtime/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>

namespace ddl {

namespace {

// The protocol's lines are at most 512 bytes.
constexpr int kLineBytes = 512;

}  // namespace

ProgressReporter ProgressReporter::from_env(const env::EnvMap& vars) {
  const auto value = env::lookup(vars, env::kProgressFd);
  if (!value || value->empty() || value->size() > 9) return ProgressReporter();
  int fd = 0;
  for (const char c : *value) {
    if (c < '0' || c > '9') return ProgressReporter();
    fd = fd * 10 + (c - '0');
  }
  return fd > 2 ? ProgressReporter(fd) : ProgressReporter();
}

void ProgressReporter::step(std::int64_t step, std::initializer_list<Section> sections) const {
  if (fd_ < 0) return;
  char line[kLineBytes];
  int n = std::snprintf(line, sizeof line, "step %" PRId64, step);
  for (const Section& s : sections) {
    if (n >= kLineBytes - 48) break;
    const double seconds = !(s.seconds >= 0) ? 0.0 : s.seconds > 1e6 ? 1e6 : s.seconds;
    n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), " %.24s=%.6f", s.name,
                       seconds);
  }
  line[n++] = '\n';
  send(line, n);
}

void ProgressReporter::pause(std::string_view what) const {
  if (fd_ < 0) return;
  char line[kLineBytes];
  const int n = std::snprintf(line, sizeof line, "pause %.*s\n",
                              static_cast<int>(what.size() > 200 ? 200 : what.size()), what.data());
  send(line, n);
}

void ProgressReporter::checkpoint(std::int64_t step) const {
  if (fd_ < 0) return;
  char line[64];
  const int n = std::snprintf(line, sizeof line, "checkpoint %" PRId64 "\n", step);
  send(line, n);
}

void ProgressReporter::epoch(std::int64_t epoch, std::int64_t batches) const {
  if (fd_ < 0) return;
  char line[64];
  const int n = std::snprintf(line, sizeof line, "epoch %" PRId64 " %" PRId64 "\n", epoch, batches);
  send(line, n);
}

void ProgressReporter::phase(std::string_view name) const {
  if (fd_ < 0) return;
  char line[64];
  const int n = std::snprintf(line, sizeof line, "phase %.*s\n",
                              static_cast<int>(name.size() > 32 ? 32 : name.size()), name.data());
  send(line, n);
}

void ProgressReporter::send(const char* line, int size) const {
  ssize_t r;
  do {
    r = ::write(fd_, line, static_cast<std::size_t>(size));
  } while (r < 0 && errno == EINTR);
  // EAGAIN (the launcher is behind) or any other error: the message is lost, the step is not.
}

}  // namespace ddl
