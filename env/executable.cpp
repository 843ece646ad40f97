#include "env/executable.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace ddl::env {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::optional<std::string> find_on_path(const std::string& name, const std::string& path) {
  if (name.empty()) return std::nullopt;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = (std::filesystem::path(dir) / name).string();
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace ddl::env
