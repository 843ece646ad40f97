// env/file.h: files read on a user's behalf (a FIFO, /dev/zero, a file over the cap, links) and
// job ids as file names.
#include "env/file.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/fifo.h"
#include "tests/support/temp_dir.h"

namespace ddl::env {
namespace {

using std::chrono::milliseconds;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The FileError message of reading `path`, or "" when it reads.
std::string read_error(const std::string& path, std::size_t max_bytes,
                       FileLinks links = FileLinks::kFollow) {
  try {
    read_regular_file(path, max_bytes, "--some_file", links);
  } catch (const FileError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e.what();
  }
  return "";
}

TEST(File, ReadsARegularFile) {
  testing::TempDir dir;
  std::ofstream(dir.file("a.json")) << "{\"x\": 1}";
  EXPECT_EQ(read_regular_file(dir.file("a.json"), 64, "--f"), "{\"x\": 1}");
  EXPECT_EQ(read_regular_file(dir.file("a.json"), 8, "--f"), "{\"x\": 1}") << "exactly the cap";
  std::ofstream(dir.file("empty"));
  EXPECT_EQ(read_regular_file(dir.file("empty"), 8, "--f"), "");
}

TEST(File, RefusesAFileOverTheCapNamingFlagPathAndCap) {
  testing::TempDir dir;
  std::ofstream(dir.file("big")) << std::string(1025, 'x');
  const std::string error = read_error(dir.file("big"), 1024);
  EXPECT_TRUE(contains(error, "--some_file='" + dir.file("big") +
                                  "': is 1025 bytes, over the cap; expected a regular file of at "
                                  "most 1 KiB"))
      << error;
}

TEST(File, RefusesDevicesAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const std::string error = read_error("/dev/zero", 1 << 20);
  EXPECT_TRUE(contains(error,
                       "--some_file='/dev/zero': is a character device; expected a regular "
                       "file of at most 1 MiB"))
      << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_TRUE(contains(read_error("/", 1 << 20), "is a directory")) << read_error("/", 1 << 20);
}

TEST(File, RefusesAFifoWithoutBlocking) {
  testing::TempDir dir;
  const std::string fifo = dir.file("fifo");
  testing::make_fifo(fifo);
  std::string error;
  EXPECT_TRUE(testing::returns_within(fifo, milliseconds(5000), [&] {
    error = read_error(fifo, 1 << 20);
  })) << "reading a FIFO without a writer blocked";
  EXPECT_TRUE(contains(error, "is a FIFO")) << error;
}

TEST(File, MissingFilesAndRefusedLinksSayWhy) {
  testing::TempDir dir;
  EXPECT_TRUE(contains(read_error(dir.file("none"), 8), "cannot be read: No such file"))
      << read_error(dir.file("none"), 8);
  std::ofstream(dir.file("target")) << "x";
  std::filesystem::create_symlink(dir.file("target"), dir.file("link"));
  EXPECT_EQ(read_error(dir.file("link"), 8), "") << "followed by default";
  EXPECT_TRUE(contains(read_error(dir.file("link"), 8, FileLinks::kRefuse), "is a symbolic link"))
      << read_error(dir.file("link"), 8, FileLinks::kRefuse);
}

TEST(File, SizeText) {
  EXPECT_EQ(size_text(1 << 20), "1 MiB");
  EXPECT_EQ(size_text(64 << 10), "64 KiB");
  EXPECT_EQ(size_text(1000), "1000 bytes");
}

TEST(FileName, JobIdsCannotLeaveTheirFolder) {
  EXPECT_EQ(safe_file_name("test2", "default"), "test2");
  EXPECT_EQ(safe_file_name("job-1_a.b", "default"), "job-1_a.b");
  EXPECT_EQ(safe_file_name("../../x", "default"), "_._.._x");
  EXPECT_EQ(safe_file_name("/abs/x", "default"), "_abs_x");
  EXPECT_EQ(safe_file_name("..", "default"), "_.");
  EXPECT_EQ(safe_file_name(".", "default"), "_");
  EXPECT_EQ(safe_file_name(".hidden", "default"), "_hidden");
  EXPECT_EQ(safe_file_name("a b$(id)", "default"), "a_b__id_");
  EXPECT_EQ(safe_file_name(std::string("a\0b", 3), "default"), "a_b");
  EXPECT_EQ(safe_file_name("", "job"), "job");
  for (const std::string id : {"../../x", "/abs/x", "..", ".", "a/../../b"}) {
    const std::filesystem::path name = safe_file_name(id, "default");
    EXPECT_EQ(name.filename(), name) << id << " gives one path component";
    EXPECT_NE(name, "..");
    EXPECT_NE(name, ".");
  }
}

}  // namespace
}  // namespace ddl::env
