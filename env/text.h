// Small text helpers shared by every layer (launcher and worker runtime): lists and durations as
// they appear in messages and in --print_config.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace ddl::env {

// The items with `separator` between them: join({"a", "b"}, ", ") == "a, b"; "" for none.
std::string join(const std::vector<std::string>& items, std::string_view separator);
// The same for integers in decimal: join({0, 2}, ",") == "0,2".
std::string join(const std::vector<int>& items, std::string_view separator);

// A duration as a user types it after a seconds flag, without a unit: "4", "0.25", "1.5" (six
// significant digits, as an ostream writes a double).
std::string seconds_text(std::chrono::milliseconds ms);

}  // namespace ddl::env
