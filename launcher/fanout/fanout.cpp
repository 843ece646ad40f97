#include "launcher/fanout/fanout.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include "env/executable.h"
#include "env/exit_codes.h"
#include "env/file.h"
#include "env/text.h"
#include "launcher/cluster/plan.h"
#include "launcher/options/flags.h"
#include "launcher/options/options.h"

namespace ddl::launcher::fanout {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kStartedMarker = "DDL_FANOUT_STARTED";

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A free port P of this machine with P+1 free too (the workers' MASTER_PORT and, next to it, the
// control store: options.h, workers_master()).
int free_port_pair() {
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 59000);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = pick(random);
    bool free = true;
    for (int p : {port, port + 1}) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(p));
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      free = free && fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (fd >= 0) ::close(fd);
    }
    if (free) return port;
  }
  throw std::runtime_error("no free pair of ports for node 0's control store");
}

// Signals that stop the job, through a pipe the poll loop watches: a signal handler can reach
// nothing but a global, set by run_fanout for its own run only.
int g_signal_pipe = -1;
void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const auto n = ::write(g_signal_pipe, &b, 1);
}

// One node's launcher (here, or ssh to its host) and its three pipes.
struct Node {
  int index = 0;
  std::string host;
  bool remote = false;
  pid_t pid = -1;
  int in = -1;             // its standard input (the variables, then kept open)
  int out = -1, err = -1;  // its stdout and stderr
  std::string out_partial, err_partial;
  std::string last_err_line;     // ssh's error when the host cannot be reached
  bool started = false;          // the remote shell said so (local: at once)
  std::optional<int> exit_code;  // once reaped
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void start(Node& node, const std::vector<std::string>& argv, const env::EnvMap& env) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);  // the terminal's Ctrl-C reaches this process only; it stops the nodes
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(s, SIG_DFL);
    ::execve(args[0], args.data(), envp.data());
    const std::string why =
        std::string("cannot run ") + args[0] + ": " + std::strerror(errno) + "\n";
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, why.data(), why.size());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  node.pid = pid;
  node.in = in[1];
  node.out = out[0];
  node.err = err[0];
}

}  // namespace

std::vector<std::string> node_flags(const FanoutJob& job, int k, int master_port) {
  const HostSlots& h = job.hosts[static_cast<std::size_t>(k)];
  std::vector<std::string> f{"--nnodes=" + std::to_string(job.hosts.size()),
                             "--node_rank=" + std::to_string(k),
                             "--master_addr=" + job.hosts.front().host,
                             "--master_port=" + std::to_string(master_port),
                             "--local_addr=" + h.host,
                             "--exit_with_stdin"};
  if (h.chosen) {
    f.push_back("--selected_gpus=" + env::join(h.slots, ","));
  } else {
    f.push_back("--nproc_per_node=" + std::to_string(h.slots.size()));
  }
  return f;
}

std::string remote_command(const std::string& cwd, const std::vector<std::string>& argv) {
  std::string cmd = "cd " + shell_quote(cwd) +
                    " || exit 127; while IFS= read -r ddl_v && [ -n \"$ddl_v\" ]; do export "
                    "\"$ddl_v\"; done; echo " +
                    kStartedMarker + "; exec";
  for (const std::string& a : argv) cmd += " " + shell_quote(a);
  return cmd;
}

env::EnvMap parse_env_file(const std::string& text, const std::string& file) {
  env::EnvMap vars;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0 ||
        line.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") <
            eq) {
      throw OptionsError(file + " line " + std::to_string(n) + ": '" + line +
                         "': expected NAME=VALUE");
    }
    vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

namespace {

constexpr std::size_t kMaxHostfileBytes = 1 << 20;

// `flags` without the fan-out flags (their values too) and without a closing "--".
std::vector<std::string> without_fanout_flags(const std::vector<std::string>& flags) {
  const std::set<std::string> fanout{"hostfile",  "hosts",    "include",  "exclude",
                                     "num_nodes", "num_gpus", "ssh_port", "forward_env"};
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    const std::string& a = flags[i];
    if (a == "--" && i + 1 == flags.size()) break;
    const FlagSpec* spec = nullptr;
    bool glued = false;  // the value is in the same word
    if (a.rfind("--", 0) == 0) {
      const std::string name = a.substr(2, a.find('=') - 2);
      if (const auto match = find_flag(name)) spec = match->spec;
      glued = a.find('=') != std::string::npos;
    } else if (a.size() >= 2 && a[0] == '-') {
      spec = find_short_flag(a[1]);
      glued = a.size() > 2;
    }
    if (spec == nullptr || !fanout.count(spec->name)) {
      kept.push_back(a);
      continue;
    }
    if (!glued) ++i;  // its value, the next word
  }
  return kept;
}

void add_env_file(const std::string& path, env::EnvMap& into) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  for (auto& [k, v] :
       parse_env_file(env::read_regular_file(path, kMaxHostfileBytes, "env file"), path)) {
    into[k] = v;
  }
}

}  // namespace

FanoutJob make_fanout_job(const LaunchOptions& options, const std::vector<std::string>& args,
                          const env::EnvMap& caller_env) {
  FanoutJob job;
  job.hosts = options.hostfile
                  ? parse_hostfile(
                        env::read_regular_file(*options.hostfile, kMaxHostfileBytes, "--hostfile"),
                        *options.hostfile)
                  : parse_host_list(*options.hosts);
  job.hosts = select_hosts(
      std::move(job.hosts),
      Selection{options.include_hosts, options.exclude_hosts, options.num_nodes, options.num_gpus});
  const std::size_t worker_words = 1 + options.worker_args.size();
  job.flags = without_fanout_flags(
      std::vector<std::string>(args.begin() + 1, args.end() - static_cast<long>(worker_words)));
  job.worker.push_back("--");
  job.worker.insert(job.worker.end(), args.end() - static_cast<long>(worker_words), args.end());
  std::error_code ec;
  job.launch_path = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  job.cwd = std::filesystem::current_path(ec).string();
  job.caller_env = caller_env;
  // DeepSpeed reads ~/.deepspeed_env, then ./.deepspeed_env.
  if (const auto home = env::lookup(caller_env, "HOME"))
    add_env_file(*home + "/.deepspeed_env", job.forwarded);
  add_env_file(job.cwd + "/.deepspeed_env", job.forwarded);
  for (const std::string& name : options.forward_env) {
    const auto value = env::lookup(caller_env, name);
    if (!value) throw OptionsError("--forward_env names " + name + ", which is not set here");
    job.forwarded[name] = *value;
  }
  job.forwarded[env::kJobSecret] =
      env::lookup(caller_env, env::kJobSecret).value_or(random_hex(16));
  job.ssh_port = options.ssh_port;
  job.master_port = options.master_port;
  job.grace = options.kill_timeout + std::chrono::seconds(10);
  return job;
}

int run_fanout(const FanoutJob& job) {
  for (const HostSlots& h : job.hosts) {
    if (h.slots.size() != job.hosts.front().slots.size()) {
      throw OptionsError("every host runs as many workers: " + job.hosts.front().host + " has " +
                         std::to_string(job.hosts.front().slots.size()) + " slot(s), " + h.host +
                         " " + std::to_string(h.slots.size()) +
                         " (narrow them with --num_gpus or --include)");
    }
  }
  for (const auto& [k, v] : job.forwarded) {
    if (v.find('\n') != std::string::npos) {
      throw OptionsError("variable " + k + " has a newline in its value: it cannot be forwarded");
    }
  }
  const auto ssh = env::find_on_path("ssh", env::lookup(job.caller_env, "PATH").value_or(""));
  if (job.hosts.size() > 1 && !ssh) {
    throw OptionsError(
        "--hostfile/--hosts start the other hosts' launchers with ssh, which is "
        "not on PATH (Debian: openssh-client)");
  }
  const int master_port = job.master_port.value_or(free_port_pair());

  int signal_fds[2];
  if (::pipe2(signal_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  g_signal_pipe = signal_fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);

  std::string variables;
  for (const auto& [k, v] : job.forwarded) variables += k + "=" + v + "\n";
  variables += "\n";

  std::vector<Node> nodes(job.hosts.size());
  std::string hosts_text;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    Node& node = nodes[k];
    node.index = static_cast<int>(k);
    node.host = job.hosts[k].host;
    node.remote = k > 0;
    hosts_text += (k ? ", " : "") + node.host;
    std::vector<std::string> argv{job.launch_path};
    argv.insert(argv.end(), job.flags.begin(), job.flags.end());
    for (const std::string& f : node_flags(job, static_cast<int>(k), master_port))
      argv.push_back(f);
    argv.insert(argv.end(), job.worker.begin(), job.worker.end());
    if (!node.remote) {
      env::EnvMap env = job.caller_env;
      for (const auto& [name, value] : job.forwarded) env[name] = value;
      start(node, argv, env);
      node.started = true;
      continue;
    }
    std::vector<std::string> ssh_argv{
        *ssh, "-T",
        "-o", "BatchMode=yes",
        "-o", "ConnectTimeout=" + env::seconds_text(job.connect_timeout)};
    if (job.ssh_port) ssh_argv.insert(ssh_argv.end(), {"-p", std::to_string(*job.ssh_port)});
    // DDL_SSH_ARGS: more of ssh's options, words split at spaces (as pdsh's
    // PDSH_SSH_ARGS_APPEND): "-F /path/config", "-i key", "-o Option=value".
    std::istringstream extra(env::lookup(job.caller_env, kSshArgs).value_or(""));
    for (std::string word; extra >> word;) ssh_argv.push_back(word);
    ssh_argv.push_back(node.host);
    ssh_argv.push_back(remote_command(job.cwd, argv));
    start(node, ssh_argv, job.caller_env);
    env::write_all(node.in, variables.data(), variables.size());
  }
  spdlog::info(
      "{} node(s) started from this terminal: {} (node 0 here, the others over ssh); "
      "control store at {}:{}",
      nodes.size(), hosts_text, job.hosts.front().host, master_port + 1);

  std::optional<int> result;       // the job's exit code, once decided
  std::optional<int> stop_signal;  // the signal that stopped the job
  bool asked_to_stop = false;      // every node's input closed
  bool killed = false;
  std::optional<Clock::time_point> deadline;  // for the next escalation

  const auto ask_all_to_stop = [&] {
    for (Node& n : nodes) close_fd(n.in);
    asked_to_stop = true;
    deadline = Clock::now() + job.grace;
  };
  const auto kill_all = [&] {
    for (Node& n : nodes) {
      if (!n.exit_code && n.pid > 0) ::kill(-n.pid, SIGKILL);
    }
    killed = true;
  };
  const auto emit = [&](Node& n, std::string& partial, bool is_err, bool flush) {
    std::size_t at;
    while ((at = partial.find('\n')) != std::string::npos || (flush && !partial.empty())) {
      const std::string line = at == std::string::npos ? partial : partial.substr(0, at);
      partial.erase(0, at == std::string::npos ? partial.size() : at + 1);
      if (!is_err && n.remote && !n.started && line == kStartedMarker) {
        n.started = true;
        continue;
      }
      if (is_err && !line.empty()) n.last_err_line = line;
      const std::string shown = n.host + ": " + line + "\n";
      env::write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, shown.data(), shown.size());
    }
  };

  while (true) {
    std::vector<pollfd> fds{{signal_fds[0], POLLIN, 0}};
    std::vector<std::pair<Node*, bool>> owners{{nullptr, false}};
    for (Node& n : nodes) {
      if (n.out >= 0) {
        fds.push_back({n.out, POLLIN, 0});
        owners.emplace_back(&n, false);
      }
      if (n.err >= 0) {
        fds.push_back({n.err, POLLIN, 0});
        owners.emplace_back(&n, true);
      }
    }
    const bool all_reaped = std::all_of(nodes.begin(), nodes.end(),
                                        [](const Node& n) { return n.exit_code.has_value(); });
    if (all_reaped && fds.size() == 1) break;
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      unsigned char sig = 0;
      while (::read(signal_fds[0], &sig, 1) == 1) {
        if (stop_signal) {
          spdlog::warn("second signal: killing every node's launcher now");
          kill_all();
        } else {
          stop_signal = sig;
          spdlog::warn("signal {}: stopping the nodes ({})", static_cast<int>(sig), hosts_text);
          if (!asked_to_stop) ask_all_to_stop();
        }
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Node& n = *owners[i].first;
      const bool is_err = owners[i].second;
      int& fd = is_err ? n.err : n.out;
      std::string& partial = is_err ? n.err_partial : n.out_partial;
      char buf[65536];
      const ssize_t got = ::read(fd, buf, sizeof buf);
      if (got > 0) {
        partial.append(buf, static_cast<std::size_t>(got));
        emit(n, partial, is_err, false);
      } else if (got == 0 || errno != EINTR) {
        emit(n, partial, is_err, true);
        close_fd(fd);
      }
    }
    for (Node& n : nodes) {
      if (n.exit_code) continue;
      int status = 0;
      if (::waitpid(n.pid, &status, WNOHANG) != n.pid) continue;
      n.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (*n.exit_code == 0 || stop_signal) continue;
      if (!result) {
        if (n.remote && !n.started) {
          spdlog::error(
              "host {} (node {}): its launcher could not be started over ssh: {}", n.host, n.index,
              n.last_err_line.empty() ? "ssh exited with code " + std::to_string(*n.exit_code)
                                      : n.last_err_line);
          result = kExitError;
          ask_all_to_stop();  // the others would wait for it until the rendezvous timeout
        } else {
          spdlog::error("host {} (node {}): launch exited with code {}; the other nodes stop too",
                        n.host, n.index, *n.exit_code);
          result = *n.exit_code;
          deadline = Clock::now() + job.grace;  // they learn it through the control plane
        }
      }
    }
    if (deadline && Clock::now() >= *deadline && !killed) {
      if (!asked_to_stop) {
        spdlog::warn(
            "nodes still running {} after the failure: stopping them",
            env::seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(job.grace)));
        ask_all_to_stop();
      } else {
        spdlog::warn("nodes still running after being asked to stop: killing them");
        kill_all();
        deadline.reset();
      }
    }
  }
  for (Node& n : nodes) close_fd(n.in);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);
  g_signal_pipe = -1;
  close_fd(signal_fds[0]);
  close_fd(signal_fds[1]);
  if (stop_signal) return 128 + *stop_signal;
  if (result) return *result;
  for (const Node& n : nodes) {
    if (n.exit_code && *n.exit_code != 0) return *n.exit_code;
  }
  return 0;
}

}  // namespace ddl::launcher::fanout
