// The log fan-out: where the output of each launched process goes.
//
// Every process's stdout and stderr arrive on one pipe (the supervisor reads it). A ProcessOutput
// writes those bytes unchanged to the process's log file, cuts them into lines, echoes whole lines
// to the launcher's console (optionally behind a prefix such as "[rank 3] ", so that processes
// never interleave within a line) and keeps the last few lines for the failure summary. A line
// longer than kMaxLineBytes without a newline is cut there.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "env/file.h"
#include "launcher/supervise/worker.h"

namespace ddl::launcher {

// Lines of a failed process's output repeated in the failure summary.
inline constexpr int kSummaryTailLines = 10;

// A line longer than this without a newline is emitted as it stands.
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;

// Writing all of a buffer to a descriptor is env::write_all (env/file.h).
using env::write_all;

// The launcher's console (a file descriptor, its stdout), shared by the outputs of one job. After
// the first failed write (the console went away) nothing more is written to it. Not thread-safe.
class Console {
 public:
  explicit Console(int fd);
  void write(const std::string& text);

 private:
  int fd_;
  bool ok_ = true;
};

// One process's output for the whole job (every generation). Not copyable; not thread-safe.
class ProcessOutput {
 public:
  // `name` ("rank 3", "server 1") is used in messages. Opens `log_path` truncated, or for
  // appending when `append` (empty: no log file), and throws SupervisorError naming the process
  // and the path when it cannot. `echo`: copy each line to `console`, after `prefix` (may be
  // empty).
  ProcessOutput(std::string name, std::string log_path, bool echo, std::string prefix,
                Console& console, bool append = false);
  ProcessOutput(const ProcessOutput&) = delete;
  ProcessOutput& operator=(const ProcessOutput&) = delete;
  ~ProcessOutput();

  // What goes before each console line from now on.
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  // Bytes read from the process's pipe.
  void consume(const char* data, std::size_t size);

  // The pipe reached EOF: a last line without a newline is emitted as it stands.
  void finish_line();

  // A new generation begins: `separator` (a whole line, with its newline) goes into the log file
  // and, when `echo_separator`, to the console; the previous generation's lines are forgotten.
  void start_generation(const std::string& separator, bool echo_separator);

  // Every whole line from now on (without its newline) also goes to `sink` (the run report).
  void on_line(std::function<void(const std::string&)> sink) { sink_ = std::move(sink); }
  // Every line echoed to the console from now on, as shown there (prefix, line, newline), also
  // goes to `sink` (torchrun's duplicate filters).
  void on_echo(std::function<void(const std::string&)> sink) { echo_sink_ = std::move(sink); }

  // The last kSummaryTailLines lines of the current generation.
  const std::deque<std::string>& tail() const { return tail_; }
  // The log file's path; empty without one.
  const std::string& log_path() const { return log_path_; }
  // True when lines are echoed to the console.
  bool echoes() const { return echo_; }

 private:
  void emit_line();
  void write_log(const char* data, std::size_t size);

  std::string name_;
  std::string log_path_;
  int log_fd_ = -1;
  bool echo_;
  std::string prefix_;
  Console& console_;
  std::string partial_;
  std::deque<std::string> tail_;
  std::function<void(const std::string&)> sink_;
  std::function<void(const std::string&)> echo_sink_;
};

// torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters: the console's lines that
// contain any of `filters` are copied, as shown, to `path` (LOG_DIR/filtered_stdout.log,
// filtered_stderr.log), opened at the first such line (truncated, or for appending). A write
// that fails is logged once and the copy stops. Not copyable; not thread-safe.
class FilteredCopy {
 public:
  FilteredCopy(std::vector<std::string> filters, std::string path, bool append);
  FilteredCopy(const FilteredCopy&) = delete;
  FilteredCopy& operator=(const FilteredCopy&) = delete;
  ~FilteredCopy();

  // A line as the console shows it (with its newline).
  void offer(const std::string& shown);

 private:
  std::vector<std::string> filters_;
  std::string path_;
  bool append_;
  int fd_ = -1;
  bool failed_ = false;
};

// The outputs of one job's workers on one console, by log file name, each opened on first use and
// kept for the whole job: a log file keeps its name even when an elastic restart gives it to
// another process. With a log dir a worker's lines go to its log file and, when it echoes (unless
// Worker::echo says otherwise: trainer 0 only; never when quiet), to the console, behind
// "[rank N] " when Worker::prefix_echo; without one every line goes to the console behind
// "[rank N] " unless Worker::echo is false. Worker::line_prefix, when set, replaces "[rank N] "
// in both cases. Not copyable; not thread-safe.
class JobOutputs {
 public:
  struct Options {
    std::optional<std::string> log_dir;  // created by create_log_dir()
    bool append_logs = false;            // open the log files for appending, not truncated
    bool quiet = false;
    // With a log dir: console lines containing any of these are copied to
    // LOG_DIR/filtered_stdout.log, resp. filtered_stderr.log (FilteredCopy).
    std::vector<std::string> stdout_filters;
    std::vector<std::string> stderr_filters;
  };
  // `console_fd`: the launcher's console (its stdout). `on_line(name, line)` gets every whole
  // line of every output (ProcessOutput::on_line); may be empty.
  JobOutputs(Options options, int console_fd,
             std::function<void(const std::string&, const std::string&)> on_line);
  JobOutputs(const JobOutputs&) = delete;
  JobOutputs& operator=(const JobOutputs&) = delete;

  // Creates the log dir if missing; throws SupervisorError when it cannot be (or is a file).
  void create_log_dir() const;
  // The output of the worker named by `w`'s role and index (its log name); throws
  // SupervisorError when its log file cannot be opened.
  ProcessOutput& of(const Worker& w);

 private:
  Options options_;
  Console console_;
  std::function<void(const std::string&, const std::string&)> on_line_;
  std::map<std::string, std::unique_ptr<ProcessOutput>> outputs_;
  std::unique_ptr<FilteredCopy> filtered_stdout_;
  std::unique_ptr<FilteredCopy> filtered_stderr_;
};

}  // namespace ddl::launcher
