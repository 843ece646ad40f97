// One run of `launch` on this node, start to end, without the process around it: resolve the
// worker and the node topology, form the multi-node job through the control connection, plan
// ranks and ports, supervise the local processes (restarting them as the restart policy says) and
// map what happened to the launcher's exit code. main.cpp only parses the command line, sets up
// signals and logging, and prints errors; tests drive whole jobs in-process through run_job().
//
// Exit codes: 0 when every worker of the last generation (after --max_restarts restarts at most)
// exits 0; that generation's first failed worker's code (128+signal when it was killed); 124 when
// the hang guard ended it; 128+signal when the launcher was interrupted; and, from
// launch_exit_for(), 2 for a bad command line or plan, 127 when WORKER is not an executable, 1 for
// any other error. The numbers are the table in env/exit_codes.h.
#pragma once

#include <exception>
#include <iosfwd>
#include <string>

#include "env/contract.h"
#include "env/error.h"
#include "env/exit_codes.h"
#include "launcher/options/options.h"

namespace ddl::launcher {

// What a job takes from the process that runs it.
struct JobContext {
  env::EnvMap caller_env;              // the launcher's environment (the workers inherit it)
  std::string launcher_dir;            // where a bare WORKER name is looked up first
  int cores = 1;                       // usable cores (OMP_NUM_THREADS default)
  std::ostream* config_out = nullptr;  // --print_config goes here; null: std::cout
};

// Runs the job described by `options` (help and version are main's business) and returns the
// launcher's exit code. Throws, before any worker runs or when the job cannot go on:
// WorkerNotFound- Error, PlanError, ControlError, SupervisorError, net::PortError, env::EnvError; a
// multi-node job tells the other nodes first.
int run_job(const LaunchOptions& options, const JobContext& context);

// The launcher's exit code and one-line message for an error that ended `launch`: ddl::exit_for
// (each error type carries its code and context), except that an env::EnvError is launch's own
// error (1, "environment contract: ...") rather than a worker's failed setup, and an exception
// that is not one of the launcher's (a ddl::Error with 1, 2 or 127) is unexpected
// (1, "unexpected error: ...").
ErrorExit launch_exit_for(const std::exception& error);

// The number of online cores (at least 1).
int online_cores();

}  // namespace ddl::launcher
