// The supervisor's one error type, shared by its parts (output, supervisor).
#pragma once

#include <stdexcept>

namespace ddl::launcher {

// The job could not be set up (log dir not creatable, a log file not openable, ...). `launch`
// prints it as one line and exits 1.
class SupervisorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ddl::launcher
