// One worker: a process of the job as this node starts it, in every generation afresh. The
// planner (launcher/cluster/plan.h) says what each worker is told; the job (launcher/job/) turns
// that into a Worker; the supervisor starts it (launcher/supervise/worker_group.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"

namespace ddl::launcher {

// "rank 3" for a trainer (the wording of every message and console prefix), "server 1",
// "heter worker 0".
std::string process_name(env::Role role, int index);
// The log file name: "workerlog.3" for a trainer, "serverlog.1" for a server, "heterlog.0" for a
// heter worker.
std::string log_file_name(env::Role role, int index);

struct Worker {
  env::Role role = env::Role::kTrainer;
  int index = 0;  // within the role: a trainer's global rank, a server's or heter worker's index
  std::string executable;         // resolved path
  std::vector<std::string> args;  // argv[1..]
  env::EnvMap env;                // the process's whole environment
  // Whether its lines go to the launcher's console. Unset: with a log folder, trainer 0 only;
  // without one, every process. `prefix_echo`: behind "[rank N] " also with a log folder.
  std::optional<bool> echo;
  bool prefix_echo = false;
  // What goes before each of its console lines instead of "[rank N] " (--log_line_prefix_template
  // made concrete), whether or not several processes are shown.
  std::optional<std::string> line_prefix;
  // Its log file's name when not log_file_name(role, index): Paddle 2.x's log folder numbers
  // each role's logs on this node from 0 (launcher/job/job.cpp).
  std::optional<std::string> log_file;
  // The CPUs it is pinned to before exec (--bind, cpu_binding.h); empty: not pinned.
  std::vector<int> cpus;

  std::string name() const { return process_name(role, index); }
  std::string log_name() const { return log_file.value_or(log_file_name(role, index)); }
};

}  // namespace ddl::launcher
