// Small text helpers shared by every layer (launcher and worker runtime): lists and durations as
// they appear in messages and in --print_config.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ddl::env {

// The items with `separator` between them: join({"a", "b"}, ", ") == "a, b"; "" for none.
std::string join(const std::vector<std::string>& items, std::string_view separator);
// The same for integers in decimal: join({0, 2}, ",") == "0,2".
std::string join(const std::vector<int>& items, std::string_view separator);

// `text` without the white space (std::isspace) at either end.
std::string_view trim(std::string_view text);

// `text` cut at every `sep`, empty parts kept (so that they can be reported): split("a,,b", ',')
// == {"a", "", "b"}; split("", ',') == {""}.
std::vector<std::string> split(std::string_view text, char sep);

// A duration as a user types it after a seconds flag, without a unit: "4", "0.25", "1.5" (six
// significant digits, as an ostream writes a double).
std::string seconds_text(std::chrono::milliseconds ms);

// `text` with `$name` and `${name}` replaced by values[name] and `$$` by `$`, as Python's
// string.Template.safe_substitute does it: a name not in `values`, and a `$` that starts no name,
// stay as typed. A name is [A-Za-z_][A-Za-z0-9_]*.
std::string substitute_template(std::string_view text,
                                const std::map<std::string, std::string>& values);

}  // namespace ddl::env
