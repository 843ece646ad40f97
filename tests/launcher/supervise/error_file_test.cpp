#include "launcher/supervise/error_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace ddl::launcher {
namespace {

namespace fs = std::filesystem;

std::string write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

TEST(ErrorFile, ReadsBothShapesTorchWrites) {
  testing::TempDir tmp;
  // What torch.distributed.elastic's @record writes...
  EXPECT_EQ(read_error_message(write(
                tmp.path() / "a.json",
                R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "x"}}})")),
            "RuntimeError: boom");
  // ... and the newer plain-string form; only the first line is kept.
  EXPECT_EQ(read_error_message(write(tmp.path() / "b.json", R"({"message": "OSError: a\nb"})")),
            "OSError: a");
  const std::string long_text(1000, 'x');
  const auto cut = read_error_message(
      write(tmp.path() / "c.json", R"({"message": ")" + long_text + R"("})"));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->size(), 303u) << "300 characters and an ellipsis";
}

TEST(ErrorFile, AnythingElseIsNoMessage) {
  testing::TempDir tmp;
  EXPECT_FALSE(read_error_message((tmp.path() / "missing.json").string()));
  EXPECT_FALSE(read_error_message(write(tmp.path() / "bad.json", "{not json")));
  EXPECT_FALSE(read_error_message(write(tmp.path() / "other.json", R"({"error": "x"})")));
  EXPECT_FALSE(read_error_message(write(tmp.path() / "num.json", R"({"message": 3})")));
  EXPECT_FALSE(read_error_message(write(tmp.path() / "empty.json", R"({"message": ""})")));
}

TEST(ErrorFile, RemoveClearsAStaleFileAndToleratesNone) {
  testing::TempDir tmp;
  const std::string path = write(tmp.path() / "error.0.json", R"({"message": "old"})");
  std::string why;
  EXPECT_TRUE(remove_error_file(path, why)) << why;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(remove_error_file(path, why)) << "nothing to remove is fine";
  fs::create_directories(tmp.path() / "dir" / "inner");
  EXPECT_FALSE(remove_error_file((tmp.path() / "dir").string(), why));
  EXPECT_NE(why.find("dir"), std::string::npos) << why;
}

// A link planted as the error file: read_error_message does not quote what it points to (a root
// launcher could otherwise print another user's file), and removing it leaves its target.
TEST(ErrorFile, PlantedLinkIsNotFollowed) {
  testing::TempDir tmp, outside;
  const std::string target = write(outside.path() / "secret.json", R"({"message": "secret"})");
  const fs::path link = tmp.path() / "error.0.json";
  fs::create_symlink(target, link);
  EXPECT_FALSE(read_error_message(link.string()));
  std::string why;
  EXPECT_TRUE(remove_error_file(link.string(), why)) << why;
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(read_error_message(target), "secret");
}

}  // namespace
}  // namespace ddl::launcher
