// env/text.h: join, split, seconds_text and substitute_template, as the messages, --print_config
// and the console prefixes write them.
#include "env/text.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
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

TEST(Text, SplitKeepsEmptyParts) {
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split("h1@h2:0,1", '@'), (std::vector<std::string>{"h1", "h2:0,1"}));
}

TEST(Text, TemplatesAreSubstitutedAsPythonsSafeSubstitute) {
  const std::map<std::string, std::string> v{{"rank", "3"}, {"local_rank", "1"}, {"role_name", "default"}};
  EXPECT_EQ(substitute_template("[${role_name}${local_rank}]:", v), "[default1]:");
  EXPECT_EQ(substitute_template("$rank: ", v), "3: ");
  EXPECT_EQ(substitute_template("r$rank-$local_rank", v), "r3-1");
  // $$ is a dollar; an unknown name, a lone or trailing $ and an unclosed brace stay as typed.
  EXPECT_EQ(substitute_template("$$rank", v), "$rank");
  EXPECT_EQ(substitute_template("${host} $x $ ${rank", v), "${host} $x $ ${rank");
  EXPECT_EQ(substitute_template("cost $", v), "cost $");
  EXPECT_EQ(substitute_template("${1}$9", v), "${1}$9");
  // A name runs as far as name characters go: $ranks is not $rank.
  EXPECT_EQ(substitute_template("$ranks ${rank}s", v), "$ranks 3s");
  EXPECT_EQ(substitute_template("", v), "");
}

}  // namespace
}  // namespace ddl::env
