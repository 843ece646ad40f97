// A multi-node job started from one terminal (--hostfile, --hosts): this process starts one
// `launch` per host, node 0 here and every other host's over OpenSSH, and stays in front of them
// until they are all gone.
//
// - Each node's launcher gets the user's flags plus its place: --nnodes, --node_rank, node 0's
//   address and a free port of this machine as --master_addr/--master_port, its own address as
//   --local_addr, and --nproc_per_node (or --selected_gpus when --include chose the slots).
// - ssh runs non-interactively (BatchMode: a host that would ask for a password fails instead),
//   with the user's own configuration (plus DDL_SSH_ARGS), a connect timeout, and no terminal. The
//   remote command changes to this folder and starts the same `launch` path.
// - Variables go over ssh's standard input, never on a command line: DDL_JOB_SECRET (made here
//   when unset), those of `.deepspeed_env` (this folder's, else $HOME's) and of --forward_env.
//   That input then stays open: each node's launcher runs with --exit_with_stdin, so when this
//   process (or its ssh) goes away, every node stops its workers.
// - Every line of every node goes to this terminal (stdout to stdout, stderr to stderr) behind
//   "HOST: ", as pdsh prints DeepSpeed's nodes.
// - Ctrl-C, SIGTERM or SIGHUP: every node is asked to stop (its input closed), and what is still
//   there after the grace is killed (a second signal kills at once). A node whose launcher fails
//   (or a host that cannot be reached: one line naming it and ssh's error) ends the job: the others
//   get the grace to end by themselves (the job's control plane tells them), then are stopped.
// - The exit code is the first failing node's, 128+signal after a signal, else 0.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/fanout/hosts.h"
#include "launcher/options/options.h"

namespace ddl::launcher::fanout {

// More of ssh's options for every connection, words split at spaces: "-F /path/ssh_config".
inline constexpr const char* kSshArgs = "DDL_SSH_ARGS";

struct FanoutJob {
  std::vector<HostSlots> hosts;             // node 0 first: this machine
  std::vector<std::string> flags;           // the user's launch flags, less the fan-out ones
  std::vector<std::string> worker;          // WORKER and its arguments
  std::string launch_path;                  // this program; the same path on every host
  std::string cwd;                          // this folder; the same on every host
  env::EnvMap caller_env;                   // this process's environment
  env::EnvMap forwarded;                    // what every node's launcher gets over its input
  std::optional<int> ssh_port;              // --ssh_port
  std::optional<int> master_port;           // --master_port given; else a free one
  std::chrono::milliseconds grace{20'000};  // how long nodes may take to stop by themselves
  std::chrono::milliseconds connect_timeout{10'000};
};

// The launch flags of node `k` (what it adds to FanoutJob::flags).
std::vector<std::string> node_flags(const FanoutJob& job, int k, int master_port);

// The command ssh runs on a remote host for `argv` (quoted for a POSIX shell): read the
// variables from the input up to an empty line, say it started, exec argv in `cwd`.
std::string remote_command(const std::string& cwd, const std::vector<std::string>& argv);

// The variables of a .deepspeed_env file's text (NAME=VALUE lines; blank lines and # comments
// skipped); OptionsError naming the file and line for anything else.
env::EnvMap parse_env_file(const std::string& text, const std::string& file);

// The job `options` (parsed from `args`, argv[0] first, WORKER's arguments last) asks for: the
// hosts (the host file read, a regular file of at most 1 MiB, and narrowed), the user's flags
// without the fan-out ones, the variables to forward (DDL_JOB_SECRET made when unset). Throws
// OptionsError or env::FileError for bad input.
FanoutJob make_fanout_job(const LaunchOptions& options, const std::vector<std::string>& args,
                          const env::EnvMap& caller_env);

// Runs the job; returns the exit code (see above). Throws only before any node started.
int run_fanout(const FanoutJob& job);

}  // namespace ddl::launcher::fanout
