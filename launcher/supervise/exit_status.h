// How a reaped process ended, in the words and numbers the launcher reports.
#pragma once

#include <string>

#include "env/exit_codes.h"  // kExitUsage: launch's own 2 (a worker's 2 is passed on as it is)

namespace ddl::launcher {

// "SIGTERM", "SIGKILL", ... ("signal 42" for others).
std::string signal_name(int signo);

// "exited with code 3", "was killed by SIGKILL (exit code 137)" for a waitpid() status.
std::string describe_status(int wait_status);

// The shell's number for a waitpid() status: the exit code, or 128 + the signal that killed it.
int exit_code_of(int wait_status);

}  // namespace ddl::launcher
