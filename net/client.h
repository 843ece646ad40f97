// The client half of the framed transport (net/frame.h): one blocking connection to a
// FramedServer, opened with a deadline and bounded backoff, authenticated by the hello handshake,
// then used for request/reply exchanges that each carry a request id and a deadline. A server that
// stops answering is a NetError, never a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>
#include <memory>
#include <string>

#include "env/contract.h"
#include "net/frame.h"

namespace ddl::net {

struct ClientOptions {
  env::Endpoint endpoint;  // the server
  std::string job_id;      // sent in every frame; replies for another job id are an error
  std::string secret;      // proven in the hello (never sent); the server must prove it too
  // Set: makes what the hello presents instead of `secret`, once per connection (e.g. a fresh
  // munge credential, launcher/coord/munge_auth.h). An exception it throws ends the constructor.
  std::function<std::string()> credential;
  Service service = Service::kStore;
  std::string server_name = "the store";  // for messages: "rank 2: the store at H:P ..."
  std::string server_host_hint = "rank 0";  // who hosts it, for the connect error
  int rank = 0;        // this client's rank, for messages and the server's join log
  int world_size = 1;  // for the server's join log
  // Deadline for the first connection (server not up yet): retries with backoff up to
  // kMaxConnectBackoff, logging at most every kConnectLogInterval which endpoint is not ready.
  std::chrono::milliseconds connect_timeout{300'000};
  // Set: called after each failed connect attempt, before the pause; true stops retrying (the
  // constructor throws UnreachableError at once). A launcher uses it to host a store nobody
  // hosts yet (launcher/coord/tcp_control_store.cpp).
  std::function<bool()> between_attempts;
  // Deadline for the handshake reply and for every reply beyond the request's own wait.
  std::chrono::milliseconds io_timeout{60'000};
};

inline constexpr std::chrono::milliseconds kConnectLogInterval{5'000};
// A rank waiting for its server (which another rank starts only after loading its libraries)
// joins within this long of it being up; a refused connect on loopback costs microseconds.
inline constexpr std::chrono::milliseconds kMaxConnectBackoff{50};

// A connection refused by the server's handshake (wrong secret, job id or service). Not retried.
class RefusedError : public NetError {
 public:
  using NetError::NetError;
};

// No server answered at the endpoint by the connect deadline (nothing listening, no route): the
// message names the endpoint, the deadline and the last attempt's own error.
class UnreachableError : public NetError {
 public:
  using NetError::NetError;
};

// Thread-safe: calls from several threads are serialised on the one connection. Move-only.
class FramedClient {
 public:
  // Connects (retrying until options.connect_timeout) and performs the handshake. Throws
  // RefusedError when the server refuses this client, UnreachableError naming the endpoint when
  // the deadline passes before a connection, NetError when the peer is not a server of this
  // protocol.
  explicit FramedClient(const ClientOptions& options);
  ~FramedClient();
  FramedClient(FramedClient&&) noexcept;
  FramedClient& operator=(FramedClient&&) noexcept;
  FramedClient(const FramedClient&) = delete;
  FramedClient& operator=(const FramedClient&) = delete;

  // Sends one request and returns its reply, whose op must be one of `expected` and whose request
  // id must match. A kError reply throws RequestFailed (the connection stays usable); anything
  // else unexpected, a lost connection or no reply within `wait + io_timeout` throws NetError and
  // leaves the client unusable (later calls throw at once, saying why). `what` names the request
  // in messages ("get 'k'").
  Frame request(std::uint8_t op, const Bytes& payload, std::chrono::milliseconds wait,
                const std::vector<std::uint8_t>& expected, const std::string& what);

  // "rank R: " and "rank R: the store at HOST:PORT", for callers' messages.
  std::string prefix() const;
  std::string context() const;
  const ClientOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The server answered a request with an error (the request's own fault, e.g. add on a value that
// is not a number). The connection is still usable.
class RequestFailed : public NetError {
 public:
  using NetError::NetError;
};

}  // namespace ddl::net
