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
// The interpreter of .py scripts and -m modules when --python does not name one.
constexpr const char* kDefaultPython = "python3";

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

WorkerCommand worker_command(const WorkerChoice& choice, const std::string& launcher_dir,
                             const env::EnvMap& env) {
  const std::string& w = choice.worker;
  const bool script =
      choice.run_path || (w.size() > 3 && w.compare(w.size() - 3, 3, ".py") == 0);
  if (choice.no_python || (!choice.module && !script)) {
    return WorkerCommand{find_worker(w, launcher_dir, env), {}, false};
  }
  if (script) {
    std::error_code ec;
    if (!fs::is_regular_file(w, ec)) {
      throw WorkerNotFoundError("script '" + w + "' does not exist (or is not a file)");
    }
  }
  const std::string interpreter = choice.python.value_or(kDefaultPython);
  WorkerCommand command;
  command.python = true;
  if (interpreter.find('/') != std::string::npos) {
    if (!is_executable_file(interpreter)) {
      throw WorkerNotFoundError("Python interpreter '" + interpreter +
                                "' is not an executable file (--python)");
    }
    command.executable = interpreter;
  } else {
    const std::string path = env::lookup(env, kPathVariable).value_or(kDefaultPath);
    auto found = env::find_on_path(interpreter, path);
    if (!found) {
      throw WorkerNotFoundError("Python interpreter '" + interpreter + "' for " +
                                (script ? "script '" : "module '") + w + "' not found on PATH ('" +
                                path + "'): choose one with --python=PATH, or run WORKER itself "
                                       "with --no_python");
    }
    command.executable = *found;
  }
  command.args = {"-u"};
  if (choice.module) command.args.push_back("-m");
  command.args.push_back(w);
  return command;
}

}  // namespace ddl::launcher
