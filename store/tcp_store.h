// The TCP rendezvous store (Boost.Asio). Rank 0 runs a `TcpStoreServer` on the first endpoint of
// PADDLE_TRAINER_ENDPOINTS; every rank (rank 0 included) talks to it through a `TcpStore` client.
//
// Transport: the framed protocol every service of a job shares (net/frame.h, net/server.h,
// net/client.h): magic, protocol version, service, request id, job id, bounded payload. A new
// connection must first send a hello with the job secret and its rank; the server drops, without
// disturbing other clients, any connection that fails the handshake or sends anything malformed.
// The store's own ops are in store/protocol.h. Server (tcp_store_server.cpp) and client
// (tcp_store.cpp) live in separate files.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "env/contract.h"
#include "store/store.h"

namespace ddl {

struct TcpStoreOptions {
  env::Endpoint endpoint;     // where the server listens / clients connect
  std::string job_id;         // frames carrying another job id are refused (e.g. a restarted
                              // job's previous generation)
  std::string secret;         // clients must present it; empty admits any client of the job id
  // Server, set: decides instead of `secret` on what a client presents, given the rank its hello
  // names: "" admits, anything else is the reason for the refusal (net/server.h, ServerOptions).
  std::function<std::string(const std::string& presented, int rank)> admit;
  // Client, set: makes what the hello presents instead of `secret`, once per connection.
  std::function<std::string()> credential;
  int rank = 0;               // this client's rank, for messages and the join report
  int world_size = 1;         // ranks expected to join, for the join report
  // Deadline for the first connection (server not up yet): retries with bounded backoff, logging
  // at most every 5 s which endpoint is not ready. Default 300 s.
  std::chrono::milliseconds connect_timeout{300'000};
  // Client, set: called after each failed connect attempt; true stops waiting (StoreUnreachable
  // at once). See net::ClientOptions::between_attempts.
  std::function<bool()> between_attempts;
  // Deadline for the handshake reply and for every reply beyond the request's own timeout (a
  // get or wait of T ms may take T + io_timeout): a store that stops answering is a StoreError,
  // never a hang. Default 60 s.
  std::chrono::milliseconds io_timeout{60'000};
};

// Hosts the store. Move-only; the destructor stops the server thread and closes every connection.
class TcpStoreServer {
 public:
  // Binds and starts serving on a background thread; throws StoreError if it cannot bind
  // (names the endpoint and the system error). Port 0 binds an ephemeral port; see port().
  explicit TcpStoreServer(const TcpStoreOptions& options);
  ~TcpStoreServer();
  TcpStoreServer(TcpStoreServer&&) noexcept;
  TcpStoreServer& operator=(TcpStoreServer&&) noexcept;
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  std::uint16_t port() const;
  // Connections dropped so far for failing the handshake or sending malformed frames (for tests).
  std::size_t dropped_connections() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// A client. Thread-safe: calls from several threads are serialised on one connection.
class TcpStore : public Store {
 public:
  // Connects (retrying until options.connect_timeout) and performs the handshake. Throws
  // StoreError naming the endpoint on refusal (wrong secret or job id), StoreUnreachable when
  // the deadline passes before a connection.
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;
  TcpStore(TcpStore&&) noexcept;
  TcpStore& operator=(TcpStore&&) noexcept;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> compare_set(const std::string& key, const std::optional<Bytes>& expected,
                                   const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  // One request each (store/protocol.h): multi-set and multi-get.
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) override;
  // A second connection with this one's options (its own handshake).
  std::unique_ptr<Store> clone() override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddl
