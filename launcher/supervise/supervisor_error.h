// The supervisor's one error type, shared by its parts (output, supervisor).
#pragma once

#include <stdexcept>
#include <string>

#include "env/error.h"

namespace ddl::launcher {

// The job could not be set up (log dir not creatable, a log file not openable, ...). `launch`
// prints it as one line and exits 1.
class SupervisorError : public Error {
 public:
  explicit SupervisorError(const std::string& what) : Error(kExitError, "", what) {}
};

}  // namespace ddl::launcher
