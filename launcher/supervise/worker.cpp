#include "launcher/supervise/worker.h"

namespace ddl::launcher {

std::string process_name(env::Role role, int index) {
  switch (role) {
    case env::Role::kServer:
      return "server " + std::to_string(index);
    case env::Role::kHeterTrainer:
      return "heter worker " + std::to_string(index);
    case env::Role::kTrainer:
      break;
  }
  return "rank " + std::to_string(index);
}

std::string log_file_name(env::Role role, int index) {
  switch (role) {
    case env::Role::kServer:
      return "serverlog." + std::to_string(index);
    case env::Role::kHeterTrainer:
      return "heterlog." + std::to_string(index);  // the fleet launcher's name
    case env::Role::kTrainer:
      break;
  }
  return "workerlog." + std::to_string(index);
}

}  // namespace ddl::launcher
