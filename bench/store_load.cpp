// store_load: the store side of a rendezvous at thousands of ranks, for bench/store_load.py.
//
//   store_load --serve --world N            hosts a TcpStoreServer on 127.0.0.1, port 0, for N
//                                           ranks; prints "port P" and serves until stdin closes
//   store_load --port P --world N --first R --count C
//                                           simulates ranks R..R+C-1 of N, one thread and one
//                                           TcpStore connection each; prints "ready", waits for a
//                                           line on stdin ("go"), runs, prints "done SECONDS"
//
// What each simulated rank does is what a joining rank does with the store: connect (handshake),
// publish its address (set), wait for every rank (ddl::barrier: three requests), read the
// addresses of the peers it needs (ring neighbours and the ranks 2^k ahead: one multi_get) and
// check them. The time is from "go" to the last of this process's ranks finishing.
//
// Exit codes: 0 done, 1 a wrong address read, 2 bad flags, 5 a store failure (one line on stderr).
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <cxxopts.hpp>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/conn_limits.h"
#include "store/tcp_store.h"

namespace ddl {
namespace {

using std::chrono::milliseconds;

TcpStoreOptions options_for(std::uint16_t port, int rank, int world) {
  TcpStoreOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "store-load";
  o.secret = "store-load-secret";
  o.rank = rank;
  o.world_size = world;
  o.connect_timeout = milliseconds(120'000);
  o.io_timeout = milliseconds(120'000);
  return o;
}

std::string address_of(int rank) {
  return "10.0." + std::to_string(rank / 256) + "." + std::to_string(rank % 256) + ":29500";
}

// The peers a rank reads: rank-1, and rank+2^k for every 2^k < world (ring and a log-step tree).
std::vector<int> peers_of(int rank, int world) {
  std::vector<int> peers;
  if (world > 1) peers.push_back((rank + world - 1) % world);
  for (int step = 1; step < world; step *= 2) {
    const int p = (rank + step) % world;
    if (p != rank && (peers.empty() || peers.back() != p)) peers.push_back(p);
  }
  return peers;
}

// One simulated rank; returns "" or what went wrong.
std::string run_rank(std::uint16_t port, int rank, int world) {
  TcpStore store(options_for(port, rank, world));
  const std::string mine = address_of(rank);
  store.set("addr/" + std::to_string(rank), Bytes(mine.begin(), mine.end()));
  barrier(store, "rendezvous", rank, world, milliseconds(300'000));
  const std::vector<int> peers = peers_of(rank, world);
  std::vector<std::string> keys;
  for (int p : peers) keys.push_back("addr/" + std::to_string(p));
  const std::vector<Bytes> values = store.multi_get(keys, milliseconds(60'000));
  for (std::size_t i = 0; i < peers.size(); ++i) {
    const std::string got(values[i].begin(), values[i].end());
    if (got != address_of(peers[i])) {
      return "rank " + std::to_string(rank) + " read '" + got + "' for rank " +
             std::to_string(peers[i]) + ", expected '" + address_of(peers[i]) + "'";
    }
  }
  return "";
}

int serve() {
  TcpStoreOptions o = options_for(0, 0, 1);
  TcpStoreServer server(o);
  std::cout << "port " << server.port() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int simulate(std::uint16_t port, int world, int first, int count) {
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, rank = first + i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      std::string error;
      try {
        error = run_rank(port, rank, world);
      } catch (const std::exception& e) {
        error = "rank " + std::to_string(rank) + ": " + e.what();
      }
      if (!error.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(error);
      }
    });
  }
  std::cout << "ready" << std::endl;
  std::string line;
  std::getline(std::cin, line);
  const auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (!errors.empty()) {
    std::cerr << "store_load: " << errors.size() << " rank(s) failed; first: " << errors.front()
              << std::endl;
    return errors.front().find("read '") != std::string::npos ? 1 : 5;
  }
  std::cout << "done " << took.count() << std::endl;
  return 0;
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  cxxopts::Options spec("store_load", "rendezvous load on the TCP store (bench/store_load.py)");
  spec.add_options()("serve", "host the store", cxxopts::value<bool>()->default_value("false"))(
      "port", "the store's port", cxxopts::value<int>()->default_value("0"))(
      "world", "ranks in the job", cxxopts::value<int>()->default_value("1"))(
      "first", "first rank simulated here", cxxopts::value<int>()->default_value("0"))(
      "count", "ranks simulated here", cxxopts::value<int>()->default_value("1"));
  int port = 0, world = 1, first = 0, count = 1;
  bool serve = false;
  try {
    auto args = spec.parse(argc, argv);
    serve = args["serve"].as<bool>();
    port = args["port"].as<int>();
    world = args["world"].as<int>();
    first = args["first"].as<int>();
    count = args["count"].as<int>();
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "store_load: " << e.what() << std::endl;
    return 2;
  }
  if (!serve &&
      (port <= 0 || port > 65535 || world < 1 || first < 0 || count < 1 || first + count > world)) {
    std::cerr << "store_load: need --port 1..65535 and 0 <= --first < --first + --count <= "
                 "--world"
              << std::endl;
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);  // a busy server's "retrying" lines are expected here
  // The server holds one descriptor per rank; a client process two per rank it simulates.
  const std::size_t wanted =
      static_cast<std::size_t>(serve ? world : 2 * count) + ddl::net::kWantedOpenFiles;
  if (const std::string why = ddl::net::raise_open_file_limit(wanted); !why.empty()) {
    std::cerr << "store_load: " << why << std::endl;
  }
  try {
    return serve ? ddl::serve()
                 : ddl::simulate(static_cast<std::uint16_t>(port), world, first, count);
  } catch (const std::exception& e) {
    std::cerr << "store_load: " << e.what() << std::endl;
    return 5;
  }
}
