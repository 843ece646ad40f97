// Bytes <-> text for tests that store or send strings.
#pragma once

#include <string>
#include <vector>

namespace ddl::testing {

inline std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }
inline std::string text(const std::vector<char>& b) { return std::string(b.begin(), b.end()); }

}  // namespace ddl::testing
