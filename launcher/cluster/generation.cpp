#include "launcher/cluster/generation.h"

#include <stdexcept>

namespace ddl::launcher {

Generation::Generation(int index) : index_(index) {
  if (index < 0) {
    throw std::invalid_argument("a generation's index must be >= 0, got " + std::to_string(index));
  }
}

std::string Generation::job_id(const std::string& job_id) const {
  return job_id + "-g" + std::to_string(index_);
}

}  // namespace ddl::launcher
