// Runs the ranks of a test job as separate processes (fork, no exec).
//
// The parent forks every rank before any thread exists in it; rank 0 then hosts a TcpStoreServer on
// 127.0.0.1 port 0 and hands the port to the other ranks through pipes. Each rank runs the body,
// which reports a failure by throwing; the process exits 0 on success and 1 (message on stderr)
// otherwise. The parent waits with a deadline and kills what is left when it passes.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/ports.h"
#include "store/tcp_store.h"

namespace ddl::testing {

// What a rank sees: its place and a store client connected to the job's store.
struct RankContext {
  int rank;
  int world_size;
  Store& store;
};

struct RankResult {
  bool exited = false;  // false: still running at the deadline (killed)
  int exit_code = -1;   // valid when exited normally
  int signal = 0;       // the terminating signal, if any
};

inline std::string describe(const RankResult& r) {
  if (!r.exited) return "did not finish before the deadline (killed)";
  if (r.signal != 0) return "killed by signal " + std::to_string(r.signal);
  return "exit code " + std::to_string(r.exit_code);
}

namespace detail {

inline void write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) throw std::runtime_error("pipe write failed");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

inline std::uint16_t read_port(int fd, std::chrono::milliseconds timeout) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(timeout.count())) != 1) {
    throw std::runtime_error("rank 0 did not send the store port within " +
                             std::to_string(timeout.count()) + " ms");
  }
  std::uint16_t port = 0;
  if (::read(fd, &port, sizeof(port)) != sizeof(port)) {
    throw std::runtime_error("short read of the store port (rank 0 died?)");
  }
  return port;
}

[[noreturn]] inline void run_child(int rank, int world_size, const std::vector<int>& pipes,
                                   const std::function<void(RankContext&)>& body) {
  int code = 0;
  try {
    TcpStoreOptions options;
    options.endpoint = {"127.0.0.1", 0};
    options.job_id = "comm-test";
    options.secret = "comm-test-secret";
    options.rank = rank;
    options.world_size = world_size;
    options.connect_timeout = std::chrono::milliseconds(20'000);
    std::unique_ptr<TcpStoreServer> server;
    if (rank == 0) {
      server = std::make_unique<TcpStoreServer>(options);
      std::uint16_t port = server->port();
      options.endpoint.port = port;
      for (int r = 1; r < world_size; ++r) write_all(pipes[2 * r + 1], &port, sizeof(port));
    } else {
      options.endpoint.port = read_port(pipes[2 * rank], std::chrono::milliseconds(20'000));
    }
    {
      TcpStore store(options);
      RankContext ctx{rank, world_size, store};
      body(ctx);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d of %d] FAILED: %s\n", rank, world_size, e.what());
    code = 1;
  } catch (...) {
    std::fprintf(stderr, "[rank %d of %d] FAILED with a non-standard exception\n", rank,
                 world_size);
    code = 1;
  }
  std::fflush(stderr);
  std::fflush(stdout);
  ::_exit(code);
}

}  // namespace detail

// Runs `body` on `world_size` ranks, each in its own process, and returns each rank's result.
// Ranks still running after `deadline` are SIGKILLed.
inline std::vector<RankResult> run_ranks(
    int world_size, const std::function<void(RankContext&)>& body,
    std::chrono::milliseconds deadline = std::chrono::milliseconds(120'000)) {
  std::vector<int> pipes(2 * static_cast<std::size_t>(world_size), -1);
  for (int r = 0; r < world_size; ++r) {
    if (::pipe(&pipes[2 * r]) != 0) throw std::runtime_error("pipe() failed");
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < world_size; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork() failed");
    if (pid == 0) detail::run_child(r, world_size, pipes, body);
    pids.push_back(pid);
  }
  for (int fd : pipes) ::close(fd);

  std::vector<RankResult> results(pids.size());
  std::size_t left = pids.size();
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (results[i].exited) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        results[i].exited = true;
        if (WIFEXITED(status)) results[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[i].signal = WTERMSIG(status);
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (results[i].exited) continue;
    ::kill(pids[i], SIGKILL);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
  }
  return results;
}

}  // namespace ddl::testing
