// A stranger's connections against a real training job: `launch` runs
// train_mnist under `ulimit -n 1024` while this test holds thousands of idle connections and
// sends garbage to rank 0's store. The job must end as an undisturbed run of the same seed ends
// (the same parameters), with logs of about the same size: the store's caps, short pre-auth
// deadline and descriptor reserve (net/server.h) keep the strangers from costing the job anything.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <iostream>
#include <thread>

#include "tests/e2e/faults/train_job.h"

namespace ddl::launch_test {
namespace {

constexpr milliseconds kRunTimeout{180'000};
constexpr std::size_t kIdleTarget = 3'000;  // connections held at once (3x the job's fd limit)

struct JobRun {
  int code = -1;
  fs::path logs;
  double seconds = 0;
  std::uintmax_t log_bytes = 0;
};

// `launch --nproc_per_node=2 train_mnist ...` with rank 0's store at `port`, the launcher (and so
// its workers) limited to 1024 descriptors, soft and hard, as `ulimit -n 1024` does.
JobRun train(const TempDir& dir, const std::string& name, int port) {
  JobRun r;
  r.logs = dir.path() / name;
  std::string command = "ulimit -n 1024 && exec '" + kLaunch + "'";
  for (const std::string& a : {std::string("--nproc_per_node=2"),
                               "--started_port=" + std::to_string(port),
                               std::string("--log_dir"),
                               r.logs.string(),
                               std::string("--print_config=false"),
                               kTrain,
                               std::string("--data_dir"),
                               kData,
                               std::string("--epochs"),
                               std::string("1"),
                               std::string("--seed"),
                               std::string("7"),
                               std::string("--log_interval"),
                               std::string("10"),
                               std::string("--threads"),
                               std::string("1"),
                               std::string("--max_steps"),
                               std::string("60"),
                               std::string("--save"),
                               (dir.path() / (name + "_ck")).string(),
                               std::string("--save_every"),
                               std::string("20")}) {
    command += " '" + a + "'";
  }
  testing::SpawnOptions o;
  o.argv = {"/bin/sh", "-c", command};
  env::EnvMap environment = env::current_environment();
  environment.erase(env::kJobSecret);
  environment.erase(env::kOmpNumThreads);
  o.env = environment;
  o.stdout_path = dir.path() / (name + ".out");
  o.stderr_path = dir.path() / (name + ".err");
  o.own_process_group = true;
  const auto start = std::chrono::steady_clock::now();
  testing::ChildProcess child(o);
  r.code = child.wait(kRunTimeout).value_or(-1);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& e : fs::directory_iterator(r.logs)) {
    if (e.is_regular_file()) r.log_bytes += e.file_size();
  }
  r.log_bytes += fs::file_size(o.stdout_path) + fs::file_size(*o.stderr_path);
  return r;
}

// Holds up to kIdleTarget idle connections to 127.0.0.1:port and sends garbage on every fifth
// new one, reopening what the server closes, until stopped.
class Flood {
 public:
  explicit Flood(int port) : port_(port), thread_([this] { run(); }) {}
  ~Flood() {
    stop_ = true;
    thread_.join();
    for (int fd : open_) ::close(fd);
  }
  std::size_t opened() const { return opened_; }

 private:
  void run() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (!stop_) {
      // Forget the connections the server closed.
      for (auto it = open_.begin(); it != open_.end();) {
        pollfd p{*it, POLLIN, 0};
        char buffer[256];
        if (::poll(&p, 1, 0) > 0 && ::recv(*it, buffer, sizeof buffer, MSG_DONTWAIT) <= 0) {
          ::close(*it);
          it = open_.erase(it);
        } else {
          ++it;
        }
      }
      for (int i = 0; i < 200 && open_.size() < kIdleTarget && !stop_; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) break;
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
          ::close(fd);
          break;  // not listening yet (or any more)
        }
        ++opened_;
        if (opened_ % 5 == 0) {
          const char garbage[] = "GET / HTTP/1.0\r\n\r\n\xff\xfe garbage";
          (void)::send(fd, garbage, sizeof garbage, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        open_.push_back(fd);
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  const int port_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> opened_{0};
  std::deque<int> open_;
  std::thread thread_;  // last: starts once the fields above exist
};

TEST(Flood, IdleAndGarbageConnectionsDoNotChangeTheJobsResult) {
  SKIP_WITHOUT_DATA();
  // This test's own descriptors: the flood holds kIdleTarget of them.
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < kIdleTarget + 512) limit.rlim_max = kIdleTarget + 512;  // root may raise it
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0) << "raising this test's open-file limit";

  TempDir dir;
  const JobRun quiet = train(dir, "quiet", ddl::testing::free_port_block_above_ephemeral());
  ASSERT_EQ(quiet.code, 0) << worker_log(quiet.logs, 0);

  const int port = ddl::testing::free_port_block_above_ephemeral();
  JobRun flooded;
  std::size_t opened = 0;
  {
    Flood flood(port);
    flooded = train(dir, "flooded", port);
    opened = flood.opened();
  }
  ASSERT_EQ(flooded.code, 0) << worker_log(flooded.logs, 0)
                             << read_file(dir.path() / "flooded.err");
  EXPECT_GE(opened, 1'000u) << "the flood reached the store";
  EXPECT_EQ(summary_of(flooded.logs, 0)["param_checksum"],
            summary_of(quiet.logs, 0)["param_checksum"]);
  EXPECT_EQ(summary_of(flooded.logs, 1)["param_checksum"],
            summary_of(quiet.logs, 1)["param_checksum"]);
  // Refusals are summarised per interval, not logged one line each.
  EXPECT_LT(flooded.log_bytes, quiet.log_bytes + 16 * 1024)
      << "quiet " << quiet.log_bytes << " B, flooded " << flooded.log_bytes << " B";
  std::cout << "flood: " << opened << " connections opened; quiet run " << quiet.seconds << " s, "
            << quiet.log_bytes << " B of logs; flooded run " << flooded.seconds << " s, "
            << flooded.log_bytes << " B of logs\n";
}

}  // namespace
}  // namespace ddl::launch_test
