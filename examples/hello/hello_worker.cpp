// hello_worker: the smallest worker `launch` can start. It reads its place in the job from the
// environment contract, prints it, and then behaves as its flags say, which the launcher's tests
// use to play a well-behaved or a failing rank:
//   --lines N          print N numbered lines            --sleep_ms N     then sleep N ms
//   --exit_code N      exit with N at the end            --fail_rank R    only rank R exits with
//                                                                          --exit_code, at once
//   --kill_self SIG    the failing rank(s) die by SIG    --spawn_child    fork a sleeping
//   grandchild
//   --ignore_sigterm   ignore SIGTERM                    --split_writes   write each line in pieces
//   --ignore_signals   ignore SIGINT, SIGTERM, SIGHUP    --show_env NAME  print NAME's value too
//   --steps N          after READY, run N "training steps" (one line "rank R step S" each)
//   --step_ms N        ... sleeping N ms before each step
//   --busy_ms N        ... and computing (a busy loop on the CPU) for N ms of CPU time first;
//                      each step is reported on DDL_PROGRESS_FD (worker/runtime/progress.h)
//   --start_file PATH  ... once PATH exists (checked every 10 ms for at most 60 s, else exit 3)
//   --fail_server I    only server I exits with --exit_code, at once (the others exit 0)
//   --server_sleep_ms N  servers sleep N ms instead of --sleep_ms (e.g. servers that outlive
//                      the trainers)
//   --list_fds         print the descriptors it inherited: "FDS 0 1 2 progress" (the one
//                      DDL_PROGRESS_FD names is printed as "progress")
//   --leave_helper MS  leave a helper running in a session of its own (out of the launcher's
//                      reach), sleeping MS ms with every descriptor the worker had except the
//                      standard streams (/dev/null there); prints "HELPER <pid>"
//   -- ARGS...         print each of ARGS as "ARG <arg>"
// The steps honour DDL_FAULT (env/contract.h) through the project's FaultInjector
// (worker/runtime/fault.h): the rank it names logs "fault injection: rank R ..." and exits, aborts
// or hangs on reaching its step (hello_worker counts steps from 0), in the start of the job it
// names (DDL_RESTART_COUNT), before printing it.
// Started as a parameter server (TRAINING_ROLE=PSERVER) it introduces itself as "server I" and
// prints "server I step S ..." lines; DDL_FAULT and --fail_rank concern trainers only. Every
// process prints the role the contract gives it in one line:
//   "ROLE TRAINER id 1 of 2 trainers, servers 127.0.0.1:7000,127.0.0.1:7001"
//   "ROLE PSERVER index 0 of 2 servers, servers ..., 2 trainers"     ("servers none": collective)
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "env/contract.h"
#include "env/error.h"
#include "logging/log.h"
#include "worker/runtime/fault.h"
#include "worker/runtime/progress.h"

namespace {

struct HelloOptions {
  int lines = 0;
  int sleep_ms = 0;
  int exit_code = 0;
  std::optional<int> fail_rank;
  std::optional<int> fail_server;
  std::optional<int> server_sleep_ms;
  int kill_self = 0;
  bool spawn_child = false;
  bool list_fds = false;
  std::optional<int> leave_helper_ms;
  bool ignore_sigterm = false;
  bool split_writes = false;
  bool ignore_signals = false;
  int steps = 0;
  int step_ms = 0;
  int busy_ms = 0;
  std::string start_file;
  std::vector<std::string> show_env;
  std::vector<std::string> echo_args;
};

void write_all(const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void say(const std::string& line) { write_all(line + "\n"); }

// Computes for `cpu` of this thread's CPU time: a step that a busy core makes slower, as real work.
void busy_for(std::chrono::milliseconds cpu) {
  timespec start{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  volatile std::uint64_t x = 1;
  for (;;) {
    for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    timespec now{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    const auto used = std::chrono::seconds(now.tv_sec - start.tv_sec) +
                      std::chrono::nanoseconds(now.tv_nsec - start.tv_nsec);
    if (used >= cpu) return;
  }
}

int parse_int(const std::string& flag, const char* text) {
  try {
    return ddl::env::parse_non_negative_int(text ? text : "", flag);
  } catch (const ddl::env::EnvError& e) {
    throw ddl::Error(ddl::kExitUsage, "", e.what());
  }
}

HelloOptions parse(int argc, char** argv) {
  HelloOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--lines")
      o.lines = parse_int(a, value());
    else if (a == "--sleep_ms")
      o.sleep_ms = parse_int(a, value());
    else if (a == "--exit_code")
      o.exit_code = parse_int(a, value());
    else if (a == "--fail_rank")
      o.fail_rank = parse_int(a, value());
    else if (a == "--fail_server")
      o.fail_server = parse_int(a, value());
    else if (a == "--server_sleep_ms")
      o.server_sleep_ms = parse_int(a, value());
    else if (a == "--kill_self")
      o.kill_self = parse_int(a, value());
    else if (a == "--spawn_child")
      o.spawn_child = true;
    else if (a == "--list_fds")
      o.list_fds = true;
    else if (a == "--leave_helper")
      o.leave_helper_ms = parse_int(a, value());
    else if (a == "--ignore_sigterm")
      o.ignore_sigterm = true;
    else if (a == "--split_writes")
      o.split_writes = true;
    else if (a == "--ignore_signals")
      o.ignore_signals = true;
    else if (a == "--steps")
      o.steps = parse_int(a, value());
    else if (a == "--step_ms")
      o.step_ms = parse_int(a, value());
    else if (a == "--busy_ms")
      o.busy_ms = parse_int(a, value());
    else if (a == "--start_file" && i + 1 < argc)
      o.start_file = argv[++i];
    else if (a == "--show_env" && i + 1 < argc)
      o.show_env.emplace_back(argv[++i]);
    else if (a == "--") {
      o.echo_args.assign(argv + i + 1, argv + argc);
      break;
    } else {
      throw ddl::Error(ddl::kExitUsage, "", "unknown argument '" + a + "'");
    }
  }
  return o;
}

// "FDS 0 1 2 progress": the descriptors open in this process, without the one that lists them;
// `progress_fd` (DDL_PROGRESS_FD's) is printed as "progress".
std::string open_descriptors(int progress_fd) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return "FDS ? (/proc/self/fd cannot be read)";
  std::vector<int> fds;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != ::dirfd(dir)) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  std::string line = "FDS";
  for (int fd : fds)
    line += " " + (fd == progress_fd ? std::string("progress") : std::to_string(fd));
  return line;
}

// A helper in a session of its own (double fork + setsid, as a daemon does): neither the
// launcher's group kill nor the parent-death signal reaches it. It keeps whatever descriptors it
// inherited, as careless helpers do, but not the output pipe (so the launcher is not kept waiting
// for the pipe to close).
void leave_helper(int sleep_ms) {
  const pid_t middle = ::fork();
  if (middle < 0) return;
  if (middle == 0) {
    ::setsid();
    const pid_t helper = ::fork();
    if (helper == 0) {
      const int null = ::open("/dev/null", O_RDWR);
      for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) ::dup2(null, fd);
      if (null > STDERR_FILENO) ::close(null);
      ::usleep(static_cast<useconds_t>(sleep_ms) * 1000);
      ::_exit(0);
    }
    if (helper > 0) say("HELPER " + std::to_string(helper));
    ::_exit(0);
  }
  ::waitpid(middle, nullptr, 0);
}

[[noreturn]] void finish(const HelloOptions& o) {
  if (o.kill_self > 0) {
    ::signal(o.kill_self, SIG_DFL);
    ::kill(::getpid(), o.kill_self);
  }
  std::exit(o.exit_code);
}

int run(int argc, char** argv) {
  const HelloOptions o = parse(argc, argv);
  const ddl::env::EnvMap env = ddl::env::current_environment();

  std::optional<ddl::env::WorkerContract> contract;
  try {
    contract = ddl::env::from_env(env);
  } catch (const ddl::env::EnvError& e) {
    throw ddl::Error(ddl::kExitUsage, "bad environment", e.what());
  }
  const int rank = contract ? contract->rank : 0;
  const int restart_count = contract ? contract->restart_count : 0;
  const bool trainer = !contract || contract->role == ddl::env::Role::kTrainer;
  // "rank 3" or "server 1": how this process names itself.
  const std::string me = (trainer ? "rank " : "server ") + std::to_string(rank);
  const ddl::ProgressReporter progress = ddl::ProgressReporter::from_env(env);
  std::optional<ddl::FaultInjector> fault;
  try {
    if (trainer) fault.emplace(env, rank, restart_count);
  } catch (const ddl::env::EnvError& e) {
    throw ddl::Error(ddl::kExitUsage, "bad environment", e.what());
  }
  ddl::logging::init(trainer ? ddl::logging::rank_role(rank) : me, spdlog::level::info);

  if (o.ignore_sigterm) ::signal(SIGTERM, SIG_IGN);
  if (o.ignore_signals) {
    for (int signo : {SIGINT, SIGTERM, SIGHUP}) ::signal(signo, SIG_IGN);
  }

  if (contract && trainer) {
    say("hello from rank " + std::to_string(contract->rank) + " of " +
        std::to_string(contract->world_size) + " (local rank " +
        std::to_string(contract->local_rank) + " of " + std::to_string(contract->local_world_size) +
        "), endpoint " + contract->current.str() + ", gpu " +
        (contract->gpu ? std::to_string(*contract->gpu) : std::string("none")));
  } else if (contract) {
    say("hello from server " + std::to_string(contract->rank) + " of " +
        std::to_string(contract->server_endpoints.size()) + " (local server " +
        std::to_string(contract->local_rank) + " of " + std::to_string(contract->local_world_size) +
        "), endpoint " + contract->current.str() + ", " + std::to_string(contract->world_size) +
        " trainer(s)");
  } else {
    say("hello from a world of one (no worker contract in the environment)");
  }
  if (contract) {
    const auto& servers = contract->server_endpoints;
    const std::string list = servers.empty() ? "none" : ddl::env::join_endpoints(servers);
    if (trainer) {
      say("ROLE " + ddl::env::role_value(contract->role) + " id " + std::to_string(rank) + " of " +
          std::to_string(contract->world_size) + " trainers, servers " + list);
    } else {
      say("ROLE " + ddl::env::role_value(contract->role) + " index " + std::to_string(rank) +
          " of " + std::to_string(servers.size()) + " servers, servers " + list + ", " +
          std::to_string(contract->world_size) + " trainers");
    }
  }
  using namespace ddl::env;
  for (const char* name :
       {kTrainerId,  kTrainersNum,   kCurrentEndpoint, kTrainerEndpoints,    kSelectedGpus,
        kRank,       kLocalRank,     kWorldSize,       kLocalWorldSize,      kMasterAddr,
        kMasterPort, kOmpNumThreads, kJobId,           kRendezvousTimeoutMs, kRestartCount,
        kLogLevel,   kFault,         kTrainingRole,    kPserverEndpoints,    kServerPort,
        kPodIp}) {
    say(std::string("ENV ") + name + "=" + lookup(env, name).value_or("<unset>"));
  }
  for (const std::string& name : o.show_env) {
    say("ENV " + name + "=" + lookup(env, name).value_or("<unset>"));
  }
  for (const std::string& arg : o.echo_args) say("ARG " + arg);
  spdlog::info("this line goes to stderr");

  for (int i = 0; i < o.lines; ++i) {
    const std::string head = me + " line " + std::to_string(i);
    const std::string body = " of " + std::to_string(o.lines) + " " + std::string(40, 'x');
    if (o.split_writes) {
      write_all(head);
      std::this_thread::yield();
      write_all(body + "\n");
    } else {
      say(head + body);
    }
  }

  if (o.spawn_child) {
    pid_t child = ::fork();
    if (child == 0) {
      for (int i = 0; i < 600; ++i) ::usleep(100'000);  // sleeps a minute unless killed
      ::_exit(0);
    }
    if (child > 0) say("CHILD " + std::to_string(child));
  }
  if (o.list_fds) {
    const auto fd = ddl::env::lookup(env, ddl::env::kProgressFd);
    say(open_descriptors(fd ? std::atoi(fd->c_str()) : -1));
  }
  if (o.leave_helper_ms) leave_helper(*o.leave_helper_ms);
  say("READY pid " + std::to_string(::getpid()) + " pgid " + std::to_string(::getpgrp()));

  if (!o.start_file.empty()) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (::access(o.start_file.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        say("hello_worker: " + o.start_file + " did not appear within 60 s");
        return 3;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (int step = 0; step < o.steps; ++step) {
    if (o.busy_ms > 0) busy_for(std::chrono::milliseconds(o.busy_ms));
    if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
    if (fault) fault->at_step(step);
    say(me + " step " + std::to_string(step) + " restart " + std::to_string(restart_count));
    progress.step(step + 1);
  }

  const bool failing = (o.fail_rank && trainer && *o.fail_rank == rank) ||
                       (o.fail_server && !trainer && *o.fail_server == rank);
  if (failing) finish(o);
  const int sleep_ms = !trainer && o.server_sleep_ms ? *o.server_sleep_ms : o.sleep_ms;
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  if (o.fail_rank || o.fail_server) return 0;
  finish(o);
}

}  // namespace

// Errors go to stdout like everything else hello_worker says: "hello_worker: <message>".
int main(int argc, char** argv) {
  return ddl::run_main([&] { return run(argc, argv); },
                       [](const ddl::ErrorExit& exit) { say("hello_worker: " + exit.message); });
}
