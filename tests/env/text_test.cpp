// env/text.h: join and seconds_text, as the messages and --print_config write them.
#include "env/text.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddl::env {
namespace {

using std::chrono::milliseconds;

TEST(Text, JoinsStringsAndIntegers) {
  EXPECT_EQ(join(std::vector<std::string>{}, ","), "");
  EXPECT_EQ(join(std::vector<std::string>{"a"}, ", "), "a");
  EXPECT_EQ(join(std::vector<std::string>{"a", "b", "c"}, "; "), "a; b; c");
  EXPECT_EQ(join(std::vector<int>{0, 2, 10}, ","), "0,2,10");
  EXPECT_EQ(join(std::vector<int>{3}, "_"), "3");
}

TEST(Text, SecondsAsAUserTypesThem) {
  EXPECT_EQ(seconds_text(milliseconds(250)), "0.25");
  EXPECT_EQ(seconds_text(milliseconds(4000)), "4");
  EXPECT_EQ(seconds_text(milliseconds(1500)), "1.5");
  EXPECT_EQ(seconds_text(milliseconds(300'000)), "300");
  EXPECT_EQ(seconds_text(milliseconds(1)), "0.001");
  EXPECT_EQ(seconds_text(milliseconds(0)), "0");
}

}  // namespace
}  // namespace ddl::env
