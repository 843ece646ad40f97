// Paddle 2.x's GPU log (--enable_gpu_log): while a job with GPUs runs, LOG_DIR/<job_id>.gpu.log
// holds what Paddle's launcher watcher writes from nvidia-smi. First the GPUs (one CSV line each
// under the header "index,uuid,driver_version,name,gpu_serial,display_active,display_mode") and
// the compute processes on them ("pid,process_name,gpu_uuid,gpu_name,used_memory"), then under
// "index,utilization_gpu,memory_total,memory_used,memory_free,timestamp" one line per GPU at once
// (however short the job) and every `interval` after. Each nvidia-smi run is bounded
// (kGpuQueryTimeout); one that fails or times out is a line in the launcher's log, and the next
// sample is tried as usual.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "env/contract.h"

namespace ddl::launcher {

inline constexpr std::chrono::milliseconds kGpuLogInterval{30'000};  // Paddle's watcher
inline constexpr std::chrono::milliseconds kGpuQueryTimeout{10'000};

struct GpuLogOptions {
  std::string path;        // the log file (truncated, as Paddle opens it)
  std::vector<int> gpus;   // the machine's GPU indices (nvidia-smi -i), not empty
  std::string nvidia_smi;  // the program's path
  env::EnvMap env;         // its environment
  std::chrono::milliseconds interval = kGpuLogInterval;
};

// Writes the log on a thread of its own until destroyed. Not copyable.
class GpuLog {
 public:
  // Opens the file and starts the thread; throws std::runtime_error naming the path when the file
  // cannot be opened.
  explicit GpuLog(GpuLogOptions options);
  GpuLog(const GpuLog&) = delete;
  GpuLog& operator=(const GpuLog&) = delete;
  // Stops the thread (an nvidia-smi run in flight ends by its own timeout) and closes the file.
  ~GpuLog();

 private:
  void run();
  // nvidia-smi's output for `args` (its CSV lines), or "" after a line in the launcher's log.
  std::string query(const std::vector<std::string>& args) const;

  GpuLogOptions options_;
  int fd_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// The GPU log of a job, when it has one: `enable` (--enable_gpu_log), a log folder, GPUs
// (`gpus`, the machine's indices) and nvidia-smi on the PATH of `env` (else one warning and
// nullptr). The file is LOG_DIR/<job_id>.gpu.log, the job id made a safe file name.
std::unique_ptr<GpuLog> start_gpu_log(bool enable, const std::string& log_dir,
                                      const std::string& job_id, const std::vector<int>& gpus,
                                      const env::EnvMap& env);

}  // namespace ddl::launcher
