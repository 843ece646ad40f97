#include "env/error.h"

#include <iostream>

namespace ddl {
namespace {

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

ErrorExit exit_for(const std::exception& error) {
  if (const auto* e = dynamic_cast<const Error*>(&error)) {
    const std::string what = one_line(e->what());
    return {e->exit_code(), e->context().empty() ? what : e->context() + ": " + what};
  }
  return {kExitError, one_line(error.what())};
}

ErrorReporter print_error(std::string program) {
  return [program = std::move(program)](const ErrorExit& exit) {
    std::cerr << program << ": error: " << exit.message << std::endl;
  };
}

int run_main(const std::function<int()>& body, const ErrorReporter& report,
             const ErrorMapper& map) {
  try {
    return body();
  } catch (const std::exception& error) {
    ErrorExit exit = map(error);
    exit.message = one_line(std::move(exit.message));
    report(exit);
    return exit.exit_code;
  }
}

}  // namespace ddl
