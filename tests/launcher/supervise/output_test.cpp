// ProcessOutput alone: bytes to the log file unchanged, whole lines to the console behind their
// prefix, the tail kept for the failure summary, and the generation separator.
#include "launcher/supervise/output.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "launcher/supervise/supervisor_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace ddl::launcher {
namespace {

using testing::read_file;
using testing::TempDir;

// A console that writes into a file of `dir`, read back with text().
class FileConsole {
 public:
  explicit FileConsole(const TempDir& dir)
      : path_(dir.file("console")),
        fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
        console_(fd_) {}
  ~FileConsole() { ::close(fd_); }
  Console& console() { return console_; }
  std::string text() const { return read_file(path_); }

 private:
  std::string path_;
  int fd_;
  Console console_;
};

void feed(ProcessOutput& out, const std::string& bytes) { out.consume(bytes.data(), bytes.size()); }

TEST(ProcessOutput, LogGetsTheBytesAndTheConsoleWholeLinesBehindThePrefix) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("rank 3", dir.file("workerlog.3"), true, "[rank 3] ", console.console());
  feed(out, "hel");
  feed(out, "lo\nwor");
  EXPECT_EQ(console.text(), "[rank 3] hello\n");
  out.finish_line();
  EXPECT_EQ(console.text(), "[rank 3] hello\n[rank 3] wor\n");
  EXPECT_EQ(read_file(dir.file("workerlog.3")), "hello\nwor");
  EXPECT_EQ(out.log_path(), dir.file("workerlog.3"));
  EXPECT_TRUE(out.echoes());
}

TEST(ProcessOutput, WithoutEchoNothingReachesTheConsole) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("server 1", dir.file("serverlog.1"), false, "", console.console());
  feed(out, "quiet\n");
  EXPECT_EQ(console.text(), "");
  EXPECT_EQ(read_file(dir.file("serverlog.1")), "quiet\n");
  EXPECT_FALSE(out.echoes());
}

TEST(ProcessOutput, WithoutALogFileOnlyTheConsoleIsWritten) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("rank 0", "", true, "[rank 0] ", console.console());
  feed(out, "a\nb\n");
  EXPECT_EQ(console.text(), "[rank 0] a\n[rank 0] b\n");
  EXPECT_TRUE(out.log_path().empty());
  EXPECT_EQ(dir.entries(), std::set<std::string>{"console"});
}

TEST(ProcessOutput, TailKeepsTheLastLinesOfTheGeneration) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("rank 0", "", false, "", console.console());
  for (int i = 0; i < kSummaryTailLines + 5; ++i) feed(out, "line " + std::to_string(i) + "\n");
  ASSERT_EQ(out.tail().size(), static_cast<std::size_t>(kSummaryTailLines));
  EXPECT_EQ(out.tail().front(), "line 5");
  EXPECT_EQ(out.tail().back(), "line " + std::to_string(kSummaryTailLines + 4));
}

TEST(ProcessOutput, ALineWithoutNewlineIsCutAtTheLimit) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("rank 0", "", false, "", console.console());
  feed(out, std::string(kMaxLineBytes, 'x'));
  ASSERT_EQ(out.tail().size(), 1u);
  EXPECT_EQ(out.tail().back().size(), kMaxLineBytes);
  feed(out, "rest\n");
  EXPECT_EQ(out.tail().back(), "rest");
}

TEST(ProcessOutput, SinkSeesEveryWholeLine) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("rank 0", "", false, "", console.console());
  std::vector<std::string> lines;
  out.on_line([&lines](const std::string& line) { lines.push_back(line); });
  feed(out, "one\ntw");
  feed(out, "o\nthree");
  out.finish_line();
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
}

TEST(ProcessOutput, NewGenerationWritesTheSeparatorAndForgetsTheTail) {
  TempDir dir;
  FileConsole console(dir);
  ProcessOutput out("rank 0", dir.file("workerlog.0"), true, "", console.console());
  feed(out, "before\n");
  out.start_generation("==== restart 1 ====\n", true);
  EXPECT_TRUE(out.tail().empty());
  feed(out, "after\n");
  EXPECT_EQ(read_file(dir.file("workerlog.0")), "before\n==== restart 1 ====\nafter\n");
  EXPECT_EQ(console.text(), "before\n==== restart 1 ====\nafter\n");

  ProcessOutput silent("rank 1", dir.file("workerlog.1"), true, "", console.console());
  silent.start_generation("==== restart 1 ====\n", false);
  EXPECT_EQ(read_file(dir.file("workerlog.1")), "==== restart 1 ====\n");
  EXPECT_EQ(console.text(), "before\n==== restart 1 ====\nafter\n");
}

TEST(ProcessOutput, LogIsTruncatedUnlessAppending) {
  TempDir dir;
  FileConsole console(dir);
  const std::string log = dir.file("workerlog.0");
  {
    ProcessOutput out("rank 0", log, false, "", console.console());
    feed(out, "first\n");
  }
  {
    ProcessOutput out("rank 0", log, false, "", console.console(), /*append=*/true);
    feed(out, "second\n");
  }
  EXPECT_EQ(read_file(log), "first\nsecond\n");
  {
    ProcessOutput out("rank 0", log, false, "", console.console());
    feed(out, "third\n");
  }
  EXPECT_EQ(read_file(log), "third\n");
}

TEST(ProcessOutput, LogThatCannotBeOpenedNamesTheProcessAndThePath) {
  TempDir dir;
  FileConsole console(dir);
  const std::string log = dir.file("missing/workerlog.2");
  try {
    ProcessOutput out("rank 2", log, false, "", console.console());
    FAIL() << "expected SupervisorError";
  } catch (const SupervisorError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(log), std::string::npos) << e.what();
  }
}

// torchrun's duplicate filters: the console's lines (as shown) that contain a filter go to
// LOG_DIR/filtered_stdout.log and filtered_stderr.log; lines that are not shown do not.
TEST(JobOutputs, ConsoleLinesMatchingAFilterAreCopied) {
  TempDir dir;
  const std::string logs = dir.file("logs");
  const std::string console_path = dir.file("console");
  const int fd = ::open(console_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  {
    JobOutputs::Options o;
    o.log_dir = logs;
    o.stdout_filters = {"loss", "a,b"};
    o.stderr_filters = {"warn"};
    JobOutputs outputs(o, fd, {});
    outputs.create_log_dir();
    Worker shown;
    shown.index = 0;
    Worker hidden;
    hidden.index = 1;  // only trainer 0 is echoed with a log dir
    feed(outputs.of(shown), "epoch 1 loss 0.5\nnothing\na,b here\nwarn: slow\n");
    feed(outputs.of(hidden), "loss of rank 1\n");
  }
  ::close(fd);
  EXPECT_EQ(read_file(logs + "/filtered_stdout.log"), "epoch 1 loss 0.5\na,b here\n");
  EXPECT_EQ(read_file(logs + "/filtered_stderr.log"), "warn: slow\n");
  EXPECT_EQ(read_file(logs + "/workerlog.1"), "loss of rank 1\n");
}

TEST(JobOutputs, WithoutAMatchNoFilteredFileIsMade) {
  TempDir dir;
  const std::string logs = dir.file("logs");
  JobOutputs::Options o;
  o.log_dir = logs;
  o.stdout_filters = {"never"};
  {
    JobOutputs outputs(o, -1, {});
    outputs.create_log_dir();
    Worker w;
    feed(outputs.of(w), "a line\n");
  }
  EXPECT_FALSE(std::filesystem::exists(logs + "/filtered_stdout.log"));
}

TEST(Console, AFailedWriteEndsTheConsoleQuietly) {
  Console gone(-1);  // EBADF, as a console that went away
  gone.write("lost\n");
  gone.write("also lost\n");
  EXPECT_FALSE(write_all(-1, "x", 1));
}

TEST(WriteAll, WritesEveryByteOfALargeBuffer) {
  TempDir dir;
  const std::string path = dir.file("big");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  const std::string data(1 << 20, 'y');
  EXPECT_TRUE(write_all(fd, data.data(), data.size()));
  ::close(fd);
  EXPECT_EQ(read_file(path), data);
}

}  // namespace
}  // namespace ddl::launcher
