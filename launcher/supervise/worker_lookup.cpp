#include "launcher/supervise/worker_lookup.h"

#include "env/executable.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

namespace ddl::launcher {

namespace fs = std::filesystem;

namespace {

// PATH is not part of the worker contract, so it has no constant in env/contract.h; it is read
// from the environment snapshot like every other variable.
constexpr const char* kPathVariable = "PATH";
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

using env::is_executable_file;

}  // namespace

std::string launcher_directory() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return self.parent_path().string();
}

std::string find_worker(const std::string& worker, const std::string& launcher_dir,
                        const env::EnvMap& env) {
  if (worker.empty()) throw WorkerNotFoundError("WORKER is empty");
  if (worker.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(worker.c_str(), &st) != 0) {
      throw WorkerNotFoundError("WORKER '" + worker + "' does not exist");
    }
    if (!is_executable_file(worker)) {
      throw WorkerNotFoundError("WORKER '" + worker + "' is not an executable file");
    }
    return worker;
  }
  std::vector<std::string> searched;
  if (!launcher_dir.empty()) {
    const std::string candidate = (fs::path(launcher_dir) / worker).string();
    if (is_executable_file(candidate)) return candidate;
    searched.push_back(launcher_dir);
  }
  const std::string path = env::lookup(env, kPathVariable).value_or(kDefaultPath);
  if (auto found = env::find_on_path(worker, path)) return *found;
  std::string where = searched.empty() ? "" : "next to launch (" + searched.front() + ") or ";
  throw WorkerNotFoundError("WORKER '" + worker + "' not found " + where + "on PATH ('" + path +
                            "')");
}

}  // namespace ddl::launcher
