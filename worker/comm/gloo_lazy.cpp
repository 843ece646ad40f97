// The lazily connected Gloo context (see gloo_lazy.h for the protocol). Mechanics:
//   - One Peer slot per rank holds the state that decides who makes that rank's pair; the pairs
//     themselves live in the transport context's vector (see gloo_lazy.h on threads).
//   - Connecting a Gloo TCP pair: each pair listens on its own port from construction; connect()
//     compares the two addresses, the larger one dials and the smaller one waits until Gloo's
//     device loop accepted. Dialling never waits for the other rank's threads, so every rank
//     first dials all the eager pairs it dials and only then waits for the ones it accepts: no
//     order of ranks can deadlock.
//   - The agent waits for its next request in slices of kAgentPoll, so it sees the stop flag
//     within about that long even when the store can no longer wake it.
#include "worker/comm/gloo_lazy.h"

#include <gloo/common/error.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "store/prefix_store.h"

namespace ddl::gloo_lazy {
namespace {

namespace tcp = gloo::transport::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long the agent's store wait lasts before it looks at its stop flag again.
constexpr milliseconds kAgentPoll{1'000};
// The request that stops an agent (a rank is never spelled this way).
const char* const kStopRequest = "stop";

Bytes to_bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

std::string addr_key(int from, int to) {
  return "lazy/addr/" + std::to_string(from) + "/" + std::to_string(to);
}
std::string request_key(int to, std::int64_t n) {
  return "lazy/req/" + std::to_string(to) + "/" + std::to_string(n);
}
std::string request_count_key(int to) { return "lazy/req/" + std::to_string(to) + "/count"; }
std::string eager_key(int rank) { return "eager/" + std::to_string(rank); }

// Whether Gloo's Pair::connect makes this side the dialling one: the same comparison it makes
// (address bytes, then the ports as stored), so the two always agree.
bool dials(const tcp::Address& self, const tcp::Address& peer) {
  const auto& a = self.getSockaddr();
  const auto& b = peer.getSockaddr();
  int order = 0;
  if (a.ss_family == AF_INET && b.ss_family == AF_INET) {
    const auto* sa = reinterpret_cast<const sockaddr_in*>(&a);
    const auto* sb = reinterpret_cast<const sockaddr_in*>(&b);
    order = std::memcmp(&sa->sin_addr, &sb->sin_addr, sizeof(in_addr));
    if (order == 0) order = sa->sin_port - sb->sin_port;
  } else if (a.ss_family == AF_INET6 && b.ss_family == AF_INET6) {
    const auto* sa = reinterpret_cast<const sockaddr_in6*>(&a);
    const auto* sb = reinterpret_cast<const sockaddr_in6*>(&b);
    order = std::memcmp(&sa->sin6_addr, &sb->sin6_addr, sizeof(in6_addr));
    if (order == 0) order = sa->sin6_port - sb->sin6_port;
  }
  // A family mismatch is left to Gloo's connect, which reports it; dial first then.
  return order >= 0;
}

// Length-prefixed concatenation of the eager pairs' addresses, in eager_peers() order.
Bytes pack(const std::vector<std::vector<char>>& parts) {
  Bytes out;
  for (const auto& part : parts) {
    const auto n = static_cast<std::uint32_t>(part.size());
    const char* len = reinterpret_cast<const char*>(&n);
    out.insert(out.end(), len, len + sizeof(n));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<std::vector<char>> unpack(const Bytes& data, std::size_t expected,
                                      const std::string& what) {
  std::vector<std::vector<char>> parts;
  std::size_t at = 0;
  while (at < data.size()) {
    std::uint32_t n = 0;
    if (data.size() - at < sizeof(n)) break;
    std::memcpy(&n, data.data() + at, sizeof(n));
    at += sizeof(n);
    if (data.size() - at < n) break;
    parts.emplace_back(data.begin() + static_cast<std::ptrdiff_t>(at),
                       data.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  if (parts.size() != expected || at != data.size()) {
    throw gloo::IoException(what + " is malformed (" + std::to_string(data.size()) +
                            " bytes, expected " + std::to_string(expected) + " addresses)");
  }
  return parts;
}

}  // namespace

std::vector<int> eager_peers(int rank, int size) {
  std::set<int> peers;
  for (long d = 1; d < size; d <<= 1) {
    peers.insert(static_cast<int>((rank + d) % size));
    peers.insert(static_cast<int>((rank - d % size + size) % size));
  }
  peers.erase(rank);
  return {peers.begin(), peers.end()};
}

class LazyPairs {
 public:
  LazyPairs(std::shared_ptr<gloo::transport::Context> transport, const Options& options)
      : transport_(std::move(transport)), options_(options) {
    peers_.reserve(static_cast<std::size_t>(options.size));
    for (int i = 0; i < options.size; ++i) peers_.push_back(std::make_unique<Peer>());
  }

  ~LazyPairs() { stop(); }

  LazyPairs(const LazyPairs&) = delete;
  LazyPairs& operator=(const LazyPairs&) = delete;

  // Makes, publishes and connects the eager pairs (see the file comment for the order).
  void connect_eager(Store& keys) {
    const int rank = options_.rank;
    const std::vector<int> eager = eager_peers(rank, options_.size);
    std::vector<std::vector<char>> mine;
    for (int peer : eager) mine.push_back(transport_->createPair(peer)->address().bytes());
    keys.set(eager_key(rank), pack(mine));

    std::vector<std::string> their_keys;
    for (int peer : eager) their_keys.push_back(eager_key(peer));
    const std::vector<Bytes> theirs = keys.multi_get(their_keys, options_.timeout);

    std::vector<std::pair<int, std::vector<char>>> accepted;
    for (std::size_t i = 0; i < eager.size(); ++i) {
      const int peer = eager[i];
      const std::vector<int> peer_eager = eager_peers(peer, options_.size);
      const auto parts =
          unpack(theirs[i], peer_eager.size(), "rank " + std::to_string(peer) + "'s address list");
      const auto at = std::find(peer_eager.begin(), peer_eager.end(), rank) - peer_eager.begin();
      const std::vector<char>& address = parts[static_cast<std::size_t>(at)];
      auto& pair = transport_->getPair(peer);
      if (dials(tcp::Address(pair->address().bytes()), tcp::Address(address))) {
        pair->connect(address);
      } else {
        accepted.emplace_back(peer, address);
      }
    }
    for (auto& [peer, address] : accepted) transport_->getPair(peer)->connect(address);
    for (int peer : eager) peers_[static_cast<std::size_t>(peer)]->state = State::kConnected;
  }

  // Takes the two store handles (already under the mesh prefix) and starts the agent.
  void start_agent(std::unique_ptr<Store> requests, std::unique_ptr<Store> agent_store) {
    requests_ = std::move(requests);
    agent_store_ = std::move(agent_store);
    agent_ = std::thread([this] { agent_loop(); });
  }

  // Stops the agent and waits for it; at most about kAgentPoll plus one store request.
  void stop() {
    if (!agent_.joinable()) return;
    stop_.store(true);
    {
      // An agent waiting for a dialler that never comes: closing the pair ends its wait.
      std::lock_guard<std::mutex> lock(agent_pair_mutex_);
      if (agent_pair_ != nullptr) agent_pair_->close();
    }
    try {
      // Wakes the agent's wait for its next request (if a requester takes the same number,
      // the agent still sees the stop flag once awake).
      requests_->set(request_key(options_.rank, next_request_.load()), to_bytes(kStopRequest));
    } catch (const std::exception&) {
      // The store is gone: the agent's own wait fails or ends within kAgentPoll.
    }
    agent_.join();
  }

  int connected_peers() const {
    int count = 0;
    for (const auto& peer : peers_) {
      std::lock_guard<std::mutex> lock(peer->mutex);
      if (peer->state == State::kConnected) ++count;
    }
    return count;
  }

  void ensure(int rank) {
    if (rank == options_.rank) return;
    Peer& peer = *peers_.at(static_cast<std::size_t>(rank));
    std::unique_lock<std::mutex> lock(peer.mutex);
    if (peer.state == State::kConnected) return;
    if (peer.state == State::kNone) {
      peer.state = State::kConnecting;
      lock.unlock();
      std::string error;
      try {
        request_pair(rank);
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      finish(peer, std::move(error));
    }
    // Else the agent is connecting this peer (it asked first) or has failed to.
    const auto deadline = Clock::now() + options_.timeout;
    if (!peer.cv.wait_until(lock, deadline, [&] { return peer.state >= State::kConnected; })) {
      throw gloo::IoException(where(rank) + "timed out after " +
                              std::to_string(options_.timeout.count()) +
                              " ms waiting for this rank's agent to connect");
    }
    if (peer.state == State::kFailed) throw gloo::IoException(where(rank) + peer.error);
  }

 private:
  enum class State { kNone, kConnecting, kConnected, kFailed };
  struct Peer {
    mutable std::mutex mutex;
    std::condition_variable cv;
    State state = State::kNone;
    std::string error;  // why it failed
  };

  std::string where(int peer) const {
    return "lazy connection between rank " + std::to_string(options_.rank) + " and rank " +
           std::to_string(peer) + " of " + std::to_string(options_.size) + options_.group_text +
           ": ";
  }

  // Under peer.mutex: records the outcome and wakes whoever waits for this peer.
  static void finish(Peer& peer, std::string error) {
    if (error.empty()) {
      peer.state = State::kConnected;
    } else {
      peer.error = std::move(error);
      peer.state = State::kFailed;
    }
    peer.cv.notify_all();
  }

  // This rank's main thread asks `peer` for a pair (see gloo_lazy.h).
  void request_pair(int peer) {
    const int rank = options_.rank;
    auto& pair = transport_->createPair(peer);
    try {
      requests_->set(addr_key(rank, peer), pair->address().bytes());
      const std::int64_t n = requests_->add(request_count_key(peer), 1);
      requests_->set(request_key(peer, n), to_bytes(std::to_string(rank)));
    } catch (const StoreError& e) {
      throw gloo::IoException(std::string("the store that carries the request failed: ") +
                              e.what());
    }
    Bytes address;
    try {
      address = requests_->get(addr_key(peer, rank), options_.timeout);
    } catch (const StoreTimeout& e) {
      throw gloo::IoException("rank " + std::to_string(peer) + " did not answer: timed out after " +
                              std::to_string(options_.timeout.count()) +
                              " ms (is it alive?): " + e.what());
    } catch (const StoreError& e) {
      throw gloo::IoException(std::string("the store that carries the answer failed: ") + e.what());
    }
    pair->connect(address);
  }

  // The agent serves `peer`'s request unless this rank already has (or is making) a pair for it.
  void serve(int peer) {
    Peer& slot = *peers_[static_cast<std::size_t>(peer)];
    {
      std::lock_guard<std::mutex> lock(slot.mutex);
      if (slot.state != State::kNone) return;
      slot.state = State::kConnecting;
    }
    std::string error;
    try {
      auto& pair = transport_->createPair(peer);
      agent_store_->set(addr_key(options_.rank, peer), pair->address().bytes());
      const Bytes address = agent_store_->get(addr_key(peer, options_.rank), options_.timeout);
      {
        std::lock_guard<std::mutex> lock(agent_pair_mutex_);
        agent_pair_ = pair.get();
      }
      if (stop_.load()) throw gloo::IoException("the mesh is being destroyed");
      pair->connect(address);
    } catch (const std::exception& e) {
      error = std::string("serving rank ") + std::to_string(peer) + "'s request: " + e.what();
    }
    {
      std::lock_guard<std::mutex> lock(agent_pair_mutex_);
      agent_pair_ = nullptr;
    }
    if (!error.empty() && !stop_.load()) spdlog::warn("gloo agent: {}{}", where(peer), error);
    std::lock_guard<std::mutex> lock(slot.mutex);
    finish(slot, std::move(error));
  }

  // The agent thread: serves this rank's requests in order until stopped. Never throws; a
  // failed store ends it (later lazy connections to this rank then time out on the requester).
  void agent_loop() {
    const int rank = options_.rank;
    auto waiting_since = Clock::now();
    while (!stop_.load()) {
      const std::int64_t n = next_request_.load();
      Bytes request;
      try {
        request = agent_store_->get(request_key(rank, n), kAgentPoll);
      } catch (const StoreTimeout&) {
        // A requester that took number n and died before writing it must not stall the rest.
        if (Clock::now() - waiting_since > options_.timeout) {
          try {
            if (agent_store_->add(request_count_key(rank), 0) > n) {
              spdlog::warn("gloo agent of rank {}: request {} never came; skipping it", rank, n);
              next_request_.store(n + 1);
              waiting_since = Clock::now();
            }
          } catch (const std::exception&) {
          }
        }
        continue;
      } catch (const std::exception& e) {
        if (!stop_.load()) {
          spdlog::debug("gloo agent of rank {}: store gone, no more lazy connections: {}", rank,
                        e.what());
        }
        return;
      }
      next_request_.store(n + 1);
      waiting_since = Clock::now();
      const std::string text(request.begin(), request.end());
      if (stop_.load() || text == kStopRequest) return;
      int peer = -1;
      try {
        peer = std::stoi(text);
      } catch (const std::exception&) {
      }
      if (peer < 0 || peer >= options_.size || peer == rank) {
        spdlog::warn("gloo agent of rank {}: ignoring request {} '{}' (not a peer rank)", rank, n,
                     text);
        continue;
      }
      serve(peer);
    }
  }

  std::shared_ptr<gloo::transport::Context> transport_;
  const Options options_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::unique_ptr<Store> requests_;     // the main thread's store handle (and stop())
  std::unique_ptr<Store> agent_store_;  // the agent's store handle
  std::thread agent_;
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> next_request_{1};
  std::mutex agent_pair_mutex_;
  gloo::transport::Pair* agent_pair_ = nullptr;  // the pair the agent is connecting
};

MeshContext::MeshContext(int rank, int size) : gloo::Context(rank, size) {}

// The agent stops before the transport context (a member of the base) closes the pairs.
MeshContext::~MeshContext() { pairs_.reset(); }

void MeshContext::ensure(int peer) { pairs_->ensure(peer); }

int MeshContext::connected_peers() const { return pairs_->connected_peers(); }

std::shared_ptr<MeshContext> MeshContext::connect(Store& store, const Options& options) {
  tcp::attr attr;
  attr.hostname = options.host;
  auto device = tcp::CreateDevice(attr);
  std::shared_ptr<MeshContext> context(new MeshContext(options.rank, options.size));
  context->setTimeout(options.timeout);
  auto transport = device->createContext(options.rank, options.size);
  transport->setTimeout(options.timeout);
  context->device_ = device;
  context->transportContext_ = transport;
  context->pairs_ = std::make_unique<LazyPairs>(transport, options);

  // The two clones (a connection and a handshake each on a TcpStore) are made while this thread
  // runs the eager rendezvous; clone() only reads the store's options, so it may run beside it.
  std::unique_ptr<Store> clones[2];
  std::exception_ptr clone_failed[2];
  std::thread cloners[2];
  for (int i = 0; i < 2; ++i) {
    cloners[i] = std::thread([&, i] {
      try {
        clones[i] = std::make_unique<PrefixStore>(store.clone(), options.store_prefix);
      } catch (...) {
        clone_failed[i] = std::current_exception();
      }
    });
  }
  std::exception_ptr eager_failed;
  try {
    PrefixStore keys(store, options.store_prefix);
    context->pairs_->connect_eager(keys);
  } catch (...) {
    eager_failed = std::current_exception();
  }
  for (auto& cloner : cloners) cloner.join();
  if (eager_failed) std::rethrow_exception(eager_failed);
  for (auto& failed : clone_failed) {
    if (failed) std::rethrow_exception(failed);
  }
  context->pairs_->start_agent(std::move(clones[0]), std::move(clones[1]));
  return context;
}

}  // namespace ddl::gloo_lazy
