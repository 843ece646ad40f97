// How a training program that links LibTorch reads the error that ends it: LibTorch's c10::Error
// by its message without the C++ backtrace that what() appends (exit kExitError), every other
// error as ddl::exit_for reads it (env/error.h). Pass it to ddl::run_main.
#pragma once

#include <c10/util/Exception.h>

#include <exception>

#include "env/error.h"

namespace ddl {

inline ErrorExit torch_exit_for(const std::exception& error) {
  if (const auto* e = dynamic_cast<const c10::Error*>(&error)) {
    return {kExitError, e->what_without_backtrace()};
  }
  return exit_for(error);
}

}  // namespace ddl
