#include "launcher/diagnose/gpu_log.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <utility>

#include "env/file.h"
#include "env/text.h"
#include "launcher/diagnose/tool_runner.h"
#include "logging/safe_open.h"

namespace ddl::launcher {
namespace {

// The headers Paddle's watcher writes (launch/controllers/watcher.py), and the nvidia-smi
// fields behind each column.
constexpr const char* kInfoHeader =
    "index,uuid,driver_version,name,gpu_serial,display_active,display_mode";
constexpr const char* kInfoFields =
    "index,uuid,driver_version,name,serial,display_active,display_mode";
constexpr const char* kProcessHeader = "pid,process_name,gpu_uuid,gpu_name,used_memory";
constexpr const char* kProcessFields = "pid,process_name,gpu_uuid,gpu_name,used_memory";
constexpr const char* kUtilHeader =
    "index,utilization_gpu,memory_total,memory_used,memory_free,timestamp";
constexpr const char* kUtilFields =
    "index,utilization.gpu,memory.total,memory.used,memory.free,timestamp";

// A full disk loses GPU samples, never the job.
void write_text(int fd, const std::string& text) { env::write_all(fd, text.data(), text.size()); }

}  // namespace

GpuLog::GpuLog(GpuLogOptions options) : options_(std::move(options)) {
  std::string why;
  fd_ = logging::open_for_writing(options_.path, logging::WriteMode::kTruncate, why);
  if (fd_ < 0) throw std::runtime_error("GPU log: " + why);
  thread_ = std::thread([this] { run(); });
}

GpuLog::~GpuLog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::string GpuLog::query(const std::vector<std::string>& args) const {
  ToolCommand command;
  command.argv.push_back(options_.nvidia_smi);
  command.argv.insert(command.argv.end(), args.begin(), args.end());
  const ToolResult r =
      run_tools({command}, options_.env, std::chrono::steady_clock::now() + kGpuQueryTimeout)
          .front();
  const auto first_line = [](const std::string& text) { return text.substr(0, text.find('\n')); };
  if (!r.start_error.empty()) {
    spdlog::warn("GPU log: cannot run {}: {}", options_.nvidia_smi, r.start_error);
  } else if (r.timed_out) {
    spdlog::warn("GPU log: {} did not answer in {} s", options_.nvidia_smi,
                 env::seconds_text(kGpuQueryTimeout));
  } else if (!r.reaped || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
    spdlog::warn("GPU log: {} {}: {}", options_.nvidia_smi, describe_exit(r.status),
                 first_line(r.err.empty() ? r.out : r.err));
  } else {
    return r.out;
  }
  return "";
}

void GpuLog::run() {
  const std::string ids = "--id=" + env::join(options_.gpus, ",");
  write_text(fd_,
             std::string(kInfoHeader) + "\n" +
                 query({"--query-gpu=" + std::string(kInfoFields), "--format=csv,noheader", ids}) +
                 "\n" + kProcessHeader + "\n" +
                 query({"--query-compute-apps=" + std::string(kProcessFields),
                        "--format=csv,noheader", ids}) +
                 "\n" + kUtilHeader + "\n");
  // One sample at once, however short the job, then one every interval until stopped.
  while (true) {
    write_text(fd_, query({"--query-gpu=" + std::string(kUtilFields),
                           "--format=csv,noheader,nounits", ids}));
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, options_.interval, [this] { return stopping_; })) return;
  }
}

std::unique_ptr<GpuLog> start_gpu_log(bool enable, const std::string& log_dir,
                                      const std::string& job_id, const std::vector<int>& gpus,
                                      const env::EnvMap& env) {
  if (!enable || log_dir.empty() || gpus.empty()) return nullptr;
  const auto path = env::lookup(env, "PATH");
  const std::optional<std::string> smi = find_on_path("nvidia-smi", path.value_or(""));
  if (!smi) {
    spdlog::warn(
        "GPU log: nvidia-smi is not on PATH, so no {}.gpu.log is written "
        "(--enable_gpu_log=false says not to)",
        env::safe_file_name(job_id, "default"));
    return nullptr;
  }
  GpuLogOptions options;
  options.path =
      (std::filesystem::path(log_dir) / (env::safe_file_name(job_id, "default") + ".gpu.log"))
          .string();
  options.gpus = gpus;
  options.nvidia_smi = *smi;
  options.env = env;
  try {
    return std::make_unique<GpuLog>(std::move(options));
  } catch (const std::exception& e) {
    spdlog::warn("{}", e.what());
    return nullptr;
  }
}

}  // namespace ddl::launcher
