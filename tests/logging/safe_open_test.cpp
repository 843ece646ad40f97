// open_for_writing (logging/safe_open.h) and FileCopy against things planted under a file's name:
// symbolic links (to a file, dangling), hard links, a FIFO, a folder, and a link the process may
// not remove. Real files in a fresh folder; the "precious" targets live in a second folder.
#include "logging/safe_open.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "logging/log.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace {

namespace fs = std::filesystem;
using ddl::logging::open_for_writing;
using ddl::logging::WriteMode;
using ddl::testing::contains;
using ddl::testing::read_file;
using ddl::testing::TempDir;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Writes `text` through a descriptor open_for_writing returned, and closes it.
void write_and_close(int fd, const std::string& text) {
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ASSERT_EQ(::close(fd), 0);
}

struct Folders {
  TempDir logs{"ddl_safe_open_logs"};
  TempDir outside{"ddl_safe_open_outside"};
  fs::path precious = outside.path() / "precious";
  Folders() { write_text(precious, "precious\n"); }
};

TEST(SafeOpen, CreatesTruncatesAndAppends) {
  TempDir dir;
  const std::string path = dir.file("workerlog.0");
  std::string why;
  write_and_close(open_for_writing(path, WriteMode::kTruncate, why), "first\n");
  write_and_close(open_for_writing(path, WriteMode::kAppend, why), "second\n");
  EXPECT_EQ(read_file(path), "first\nsecond\n");
  write_and_close(open_for_writing(path, WriteMode::kTruncate, why), "third\n");
  EXPECT_EQ(read_file(path), "third\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t umask = ::umask(0);
  ::umask(umask);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~umask) << "created 0644 less the umask";
}

TEST(SafeOpen, DescriptorIsCloseOnExec) {
  TempDir dir;
  std::string why;
  const int fd = open_for_writing(dir.file("f"), WriteMode::kAppend, why);
  ASSERT_GE(fd, 0) << why;
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(::fcntl(fd, F_GETFL) & O_APPEND, 0);
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  ::close(fd);
}

TEST(SafeOpen, PlantedSymlinkIsReplacedNotFollowed) {
  for (WriteMode mode : {WriteMode::kTruncate, WriteMode::kAppend}) {
    Folders f;
    const fs::path log = f.logs.path() / "stacks.0.txt";
    fs::create_symlink(f.precious, log);
    std::string why;
    write_and_close(open_for_writing(log.string(), mode, why), "mine\n");
    EXPECT_EQ(read_file(f.precious), "precious\n") << "the link's target was written";
    EXPECT_FALSE(fs::is_symlink(log));
    EXPECT_EQ(read_file(log), "mine\n");
  }
}

TEST(SafeOpen, DanglingSymlinkCreatesNothingAtItsTarget) {
  Folders f;
  const fs::path log = f.logs.path() / "workerlog.0";
  const fs::path target = f.outside.path() / "created_by_root";
  fs::create_symlink(target, log);
  std::string why;
  write_and_close(open_for_writing(log.string(), WriteMode::kTruncate, why), "mine\n");
  EXPECT_FALSE(fs::exists(target));
  EXPECT_EQ(read_file(log), "mine\n");
}

TEST(SafeOpen, HardLinkIsReplacedNotTruncated) {
  Folders f;
  const fs::path log = f.logs.path() / "workerlog.0";
  fs::create_hard_link(f.precious, log);
  std::string why;
  write_and_close(open_for_writing(log.string(), WriteMode::kTruncate, why), "mine\n");
  EXPECT_EQ(read_file(f.precious), "precious\n");
  EXPECT_EQ(fs::hard_link_count(log), 1u);
  EXPECT_EQ(read_file(log), "mine\n");
}

TEST(SafeOpen, FifoIsRefusedAtOnce) {
  TempDir dir;
  const std::string path = dir.file("workerlog.0");
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(open_for_writing(path, WriteMode::kAppend, why), -1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << "blocked";
  EXPECT_TRUE(contains(why, "'" + path + "'")) << why;
  EXPECT_TRUE(contains(why, "FIFO")) << why;
  EXPECT_FALSE(contains(why, "\n")) << why;
}

TEST(SafeOpen, FolderUnderTheNameIsAnError) {
  TempDir dir;
  fs::create_directory(dir.path() / "report.json");
  std::string why;
  EXPECT_EQ(open_for_writing(dir.file("report.json"), WriteMode::kTruncate, why), -1);
  EXPECT_TRUE(contains(why, dir.file("report.json"))) << why;
}

TEST(SafeOpen, MissingFolderNamesThePath) {
  TempDir dir;
  const std::string path = dir.file("no/such/folder/log");
  std::string why;
  EXPECT_EQ(open_for_writing(path, WriteMode::kTruncate, why), -1);
  EXPECT_EQ(why, "cannot write '" + path + "': opening its folder: No such file or directory");
}

// A process that may not remove the link (here: not allowed to write the folder, as another
// user's link in a sticky /tmp) gets a one-line error and writes nothing through it.
TEST(SafeOpen, LinkThatCannotBeRemovedIsAOneLineError) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (runs the open as user nobody)";
  Folders f;
  const uid_t nobody = 65534;
  fs::permissions(f.logs.path(), fs::perms(0755));
  fs::permissions(f.outside.path(), fs::perms(0755));
  ASSERT_EQ(::chown(f.precious.c_str(), nobody, nobody), 0);
  const fs::path log = f.logs.path() / "workerlog.0";
  fs::create_symlink(f.precious, log);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    if (::setgid(nobody) != 0 || ::setuid(nobody) != 0) ::_exit(2);
    std::string why;
    const int fd = open_for_writing(log.string(), WriteMode::kTruncate, why);
    [[maybe_unused]] const ssize_t n = ::write(pipe_fds[1], why.data(), why.size());
    ::_exit(fd < 0 ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string why;
  char buffer[1024];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) why.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "opened through the link: " << why;
  EXPECT_EQ(read_file(f.precious), "precious\n");
  EXPECT_TRUE(fs::is_symlink(log));
  EXPECT_TRUE(contains(why, "refusing to write '" + log.string() + "': it is a symbolic link to '" +
                                f.precious.string() + "'"))
      << why;
  EXPECT_TRUE(contains(why, "Permission denied")) << why;
  EXPECT_FALSE(contains(why, "\n")) << why;
}

// Paddle 2.x's JOB_ID.POD.log: the launcher's own lines, copied by a spdlog sink.
TEST(SafeOpen, FileCopyDoesNotFollowAPlantedLink) {
  Folders f;
  const fs::path pod_log = f.logs.path() / "default.pod.log";
  fs::create_symlink(f.precious, pod_log);
  ddl::logging::init("launch", spdlog::level::info);
  {
    ddl::logging::FileCopy copy(pod_log.string());
    spdlog::info("a line for the pod log");
  }
  spdlog::info("a line after the copy ended");
  EXPECT_EQ(read_file(f.precious), "precious\n");
  ASSERT_FALSE(fs::is_symlink(pod_log));
  const std::string text = read_file(pod_log);
  EXPECT_TRUE(contains(text, "launch] a line for the pod log\n")) << text;
  EXPECT_FALSE(contains(text, "after the copy")) << text;
}

TEST(SafeOpen, FileCopyThrowsNamingThePath) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("pod.log").c_str(), 0644), 0);
  ddl::logging::init("launch", spdlog::level::info);
  try {
    ddl::logging::FileCopy copy(dir.file("pod.log"));
    FAIL() << "no error";
  } catch (const spdlog::spdlog_ex& e) {
    EXPECT_TRUE(contains(e.what(), dir.file("pod.log"))) << e.what();
  }
}

}  // namespace
