// Reading files and searching text in tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ddl::testing {

// The whole file; empty when it cannot be read.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Occurrences of `part` in `text` (overlapping ones included).
inline int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace ddl::testing
