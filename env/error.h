// The error policy in code: module boundaries throw an exception derived from ddl::Error, which
// carries the exit code a program ends with and the words it is reported under; every program's
// main runs inside run_main(), which maps the exception that ends it to one line and that code.
//
//   class StoreError : public Error { ... Error(kExitParallel, "rendezvous store", what) ... };
//   int main(int argc, char** argv) {
//     return ddl::run_main([&] { return train(argc, argv); }, ddl::print_error("train_mnist"));
//   }
//   // StoreError("no key 'x'"): "train_mnist: error: rendezvous store: no key 'x'", exit 5
#pragma once

#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "env/exit_codes.h"

namespace ddl {

// An error that knows how it ends a program: its exit code (env/exit_codes.h) and the context it
// is reported under ("rendezvous store"; empty: the message stands alone). Header-only, so a
// library that links nothing of ours (examples/mnist) can derive from it too.
class Error : public std::runtime_error {
 public:
  Error(int exit_code, std::string context, const std::string& what)
      : std::runtime_error(what), exit_code_(exit_code), context_(std::move(context)) {}

  int exit_code() const noexcept { return exit_code_; }
  const std::string& context() const noexcept { return context_; }

 private:
  int exit_code_;
  std::string context_;
};

// The exit code and the one-line message for the error that ends a program.
struct ErrorExit {
  int exit_code = kExitError;
  std::string message;
};

// A ddl::Error: its code, "<context>: <what>" (or <what> alone). Any other std::exception:
// kExitError and its what(). Line breaks in the text become spaces.
ErrorExit exit_for(const std::exception& error);

// A program's own reading of the errors it maps differently from exit_for (LibTorch's, ...);
// it returns exit_for(error) for the rest.
using ErrorMapper = std::function<ErrorExit(const std::exception&)>;
// Prints the line for the error that ends the program.
using ErrorReporter = std::function<void(const ErrorExit&)>;

// "<program>: error: <message>" on stderr.
ErrorReporter print_error(std::string program);

// Runs `body` and returns its exit code. When it throws a std::exception, `map` gives the exit
// code and the line, `report` prints the line, and that code is returned. Nothing else is caught.
int run_main(const std::function<int()>& body, const ErrorReporter& report,
             const ErrorMapper& map = exit_for);

}  // namespace ddl
