#include "launcher/supervise/worker.h"

namespace ddl::launcher {

std::string process_name(env::Role role, int index) {
  return (role == env::Role::kServer ? "server " : "rank ") + std::to_string(index);
}

std::string log_file_name(env::Role role, int index) {
  return (role == env::Role::kServer ? "serverlog." : "workerlog.") + std::to_string(index);
}

}  // namespace ddl::launcher
