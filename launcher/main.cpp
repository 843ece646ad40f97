// `launch [options] WORKER [WORKER ARGS...]`: starts this node's workers of a data-parallel job
// and supervises them. This file is the process around the job: the command line
// (launcher/options/options.h), signals, logging, and errors printed as one line. The job itself,
// and what each exit code means, is launcher/job/job.h; the README's "Failure semantics" has the
// whole story.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "env/error.h"
#include "launcher/fanout/fanout.h"
#include "launcher/job/job.h"
#include "launcher/options/flags.h"
#include "launcher/options/launch_ps.h"
#include "launcher/options/options.h"
#include "launcher/supervise/worker_lookup.h"
#include "logging/log.h"
#include "net/conn_limits.h"

namespace {

// --exit_with_stdin: the end of standard input (the ssh connection of a node that --hostfile
// started, or its first host, gone) stops the job as SIGTERM does.
void stop_when_stdin_ends() {
  std::thread([] {
    char buf[256];
    while (true) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      spdlog::warn("standard input ended (--exit_with_stdin): stopping the job");
      ::kill(::getpid(), SIGTERM);
      return;
    }
  }).detach();
}

int run(int argc, char** argv) {
  using namespace ddl::launcher;
  const ddl::env::EnvMap caller_env = ddl::env::current_environment();
  MachineCounts machine;
  machine.cores = online_cores();
  machine.gpus = visible_gpu_count(caller_env);
  // Started as `launch_ps` (a link to launch): Paddle 1.8's parameter-server launcher's defaults.
  std::vector<std::string> args(argv, argv + argc);
  if (!args.empty() && started_as_launch_ps(args[0])) args = launch_ps_arguments(args);
  std::vector<const char*> c_args;
  for (const std::string& a : args) c_args.push_back(a.c_str());
  const LaunchOptions options =
      parse_options(static_cast<int>(c_args.size()), c_args.data(), caller_env, machine);
  if (options.help) {
    std::cout << help_text();
    return 0;
  }
  if (options.version) {
    std::cout << version_text() << "\n";
    return 0;
  }
  spdlog::set_level(options.log_level);
  // Descriptors for the job's own files, pipes and connections, beyond what strangers' connections
  // to the control store may take (net/server.h); workers inherit the raised limit.
  if (const std::string why = ddl::net::raise_open_file_limit(ddl::net::kWantedOpenFiles);
      !why.empty()) {
    spdlog::warn("{}", why);
  }
  if (options.fanout()) {
    return fanout::run_fanout(fanout::make_fanout_job(options, args, caller_env));
  }
  if (options.exit_with_stdin) stop_when_stdin_ends();
  JobContext context;
  context.caller_env = caller_env;
  context.launcher_dir = launcher_directory();
  context.cores = machine.cores;
  return run_job(options, context);
}

}  // namespace

int main(int argc, char** argv) {
  // A console that went away must not kill the launcher (and with it the job): writes fail with
  // EPIPE instead. Workers get the default disposition back before exec.
  ::signal(SIGPIPE, SIG_IGN);
  ddl::logging::init("launch", spdlog::level::info);
  return ddl::run_main([&] { return run(argc, argv); },
                       [](const ddl::ErrorExit& exit) { spdlog::error("{}", exit.message); },
                       ddl::launcher::launch_exit_for);
}
