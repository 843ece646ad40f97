#include "launcher/supervise/output.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "launcher/supervise/supervisor_error.h"
#include "logging/safe_open.h"

namespace ddl::launcher {

Console::Console(int fd) : fd_(fd) {}

void Console::write(const std::string& text) {
  if (ok_) ok_ = write_all(fd_, text.data(), text.size());
}

ProcessOutput::ProcessOutput(std::string name, std::string log_path, bool echo, std::string prefix,
                             Console& console, bool append)
    : name_(std::move(name)),
      log_path_(std::move(log_path)),
      echo_(echo),
      prefix_(std::move(prefix)),
      console_(console) {
  if (log_path_.empty()) return;
  std::string why;
  log_fd_ = logging::open_for_writing(
      log_path_, append ? logging::WriteMode::kAppend : logging::WriteMode::kTruncate, why);
  if (log_fd_ < 0) throw SupervisorError("log file for " + name_ + ": " + why);
}

ProcessOutput::~ProcessOutput() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void ProcessOutput::write_log(const char* data, std::size_t size) {
  if (log_fd_ < 0 || write_all(log_fd_, data, size)) return;
  spdlog::error("writing {} failed: {}; {}'s further output is dropped", log_path_,
                std::strerror(errno), name_);
  ::close(log_fd_);
  log_fd_ = -1;
}

void ProcessOutput::consume(const char* data, std::size_t size) {
  write_log(data, size);
  std::size_t start = 0;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') continue;
    partial_.append(data + start, i - start);
    emit_line();
    start = i + 1;
  }
  partial_.append(data + start, size - start);
  if (partial_.size() >= kMaxLineBytes) emit_line();
}

void ProcessOutput::finish_line() {
  if (!partial_.empty()) emit_line();
}

void ProcessOutput::start_generation(const std::string& separator, bool echo_separator) {
  write_log(separator.data(), separator.size());
  if (echo_separator) console_.write(separator);
  partial_.clear();
  tail_.clear();
}

void ProcessOutput::emit_line() {
  std::string line;
  line.swap(partial_);
  if (echo_) {
    const std::string shown = prefix_ + line + '\n';
    console_.write(shown);
    if (echo_sink_) echo_sink_(shown);
  }
  if (sink_) sink_(line);
  tail_.push_back(std::move(line));
  if (static_cast<int>(tail_.size()) > kSummaryTailLines) tail_.pop_front();
}

FilteredCopy::FilteredCopy(std::vector<std::string> filters, std::string path, bool append)
    : filters_(std::move(filters)), path_(std::move(path)), append_(append) {}

FilteredCopy::~FilteredCopy() {
  if (fd_ >= 0) ::close(fd_);
}

void FilteredCopy::offer(const std::string& shown) {
  if (failed_) return;
  bool match = false;
  for (const std::string& f : filters_) match = match || shown.find(f) != std::string::npos;
  if (!match) return;
  if (fd_ < 0) {
    std::string why;
    fd_ = logging::open_for_writing(
        path_, append_ ? logging::WriteMode::kAppend : logging::WriteMode::kTruncate, why);
    if (fd_ < 0) {
      failed_ = true;
      spdlog::error("the filtered copy of the console cannot be written: {}", why);
      return;
    }
  }
  if (write_all(fd_, shown.data(), shown.size())) return;
  failed_ = true;
  spdlog::error("writing {} failed: {}; no more lines are copied there", path_,
                std::strerror(errno));
}

JobOutputs::JobOutputs(Options options, int console_fd,
                       std::function<void(const std::string&, const std::string&)> on_line)
    : options_(std::move(options)), console_(console_fd), on_line_(std::move(on_line)) {
  if (!options_.log_dir) return;
  const std::filesystem::path dir(*options_.log_dir);
  if (!options_.stdout_filters.empty()) {
    filtered_stdout_ = std::make_unique<FilteredCopy>(
        options_.stdout_filters, (dir / "filtered_stdout.log").string(), options_.append_logs);
  }
  if (!options_.stderr_filters.empty()) {
    filtered_stderr_ = std::make_unique<FilteredCopy>(
        options_.stderr_filters, (dir / "filtered_stderr.log").string(), options_.append_logs);
  }
}

void JobOutputs::create_log_dir() const {
  if (!options_.log_dir) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(*options_.log_dir, ec);
  if (ec || !fs::is_directory(*options_.log_dir)) {
    throw SupervisorError("cannot create --log_dir '" + *options_.log_dir + "': " +
                          (ec ? ec.message() : std::string("exists and is not a directory")));
  }
}

ProcessOutput& JobOutputs::of(const Worker& w) {
  auto& slot = outputs_[w.log_name()];
  if (slot) {
    // A template's rank or local rank may differ in a later generation.
    if (w.line_prefix) slot->set_prefix(*w.line_prefix);
    return *slot;
  }
  const std::string prefix = w.line_prefix.value_or("[" + w.name() + "] ");
  if (options_.log_dir) {
    const bool echo =
        w.echo.value_or(w.role == env::Role::kTrainer && w.index == 0) && !options_.quiet;
    slot = std::make_unique<ProcessOutput>(
        w.name(), (std::filesystem::path(*options_.log_dir) / w.log_name()).string(), echo,
        w.prefix_echo || w.line_prefix ? prefix : "", console_, options_.append_logs);
  } else {
    slot = std::make_unique<ProcessOutput>(w.name(), "", w.echo.value_or(true), prefix, console_);
  }
  if (on_line_) {
    slot->on_line([this, name = w.name()](const std::string& line) { on_line_(name, line); });
  }
  if (slot->echoes() && (filtered_stdout_ || filtered_stderr_)) {
    slot->on_echo([this](const std::string& shown) {
      if (filtered_stdout_) filtered_stdout_->offer(shown);
      if (filtered_stderr_) filtered_stderr_->offer(shown);
    });
  }
  return *slot;
}

}  // namespace ddl::launcher
