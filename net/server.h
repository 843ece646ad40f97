// The server half of the framed transport (net/frame.h): accepts connections on one endpoint,
// runs the handshake (a challenge, then a hello proving the secret for the job id and service:
// net/auth.h) and the size caps, and hands every request of an
// authenticated connection to the `ServiceHandler` of the service it serves. Everything a service does runs on the
// server's one thread, so a service needs no locks of its own.
//
// The store (store/tcp_store.h) is one such service; a parameter server is another.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "env/contract.h"
#include "net/frame.h"

namespace ddl::net {

// A connection that completed the handshake, as a service sees it. Server thread only.
class Connection {
 public:
  virtual ~Connection() = default;
  // Queues the reply to the request `request_id`. Ignored once the connection is closed.
  virtual void reply(std::uint32_t request_id, std::uint8_t op, Bytes payload) = 0;
  // Counts the connection as dropped (a peer that broke the protocol), logs why, closes it.
  virtual void drop(const std::string& reason) = 0;
  virtual bool closed() const = 0;
  virtual const std::string& peer() const = 0;  // "127.0.0.1:50412"
  virtual int rank() const = 0;                 // what the client's hello said
};

// What a server serves. Every call runs on the server thread.
class ServiceHandler {
 public:
  virtual ~ServiceHandler() = default;
  // A request from an authenticated connection (its job id already checked). Reply through
  // `connection` now or later (keep a weak_ptr: it may close meanwhile). Throwing ProtocolError
  // (a malformed payload, an unknown op) drops the connection; any other exception is logged and
  // drops it too; nothing escapes into the server loop.
  virtual void on_request(const std::shared_ptr<Connection>& connection, Frame&& request) = 0;
  // `connection` closed (by the peer, a drop, or the server stopping): forget what it waits for.
  virtual void on_close(Connection& connection) = 0;
  // The server is stopping; cancel timers. Called once, before every connection is closed.
  virtual void on_stop() {}
};

struct ServerOptions {
  env::Endpoint endpoint;     // where to listen; port 0 binds an ephemeral port
  std::string job_id;         // frames carrying another job id are refused
  std::string secret;  // clients must prove they hold it; empty admits any client of the job id
  // Set: decides instead of `secret` on what a client presents in its hello (e.g. a munge
  // credential, launcher/coord/munge_auth.h), given the rank the hello names. Returns "" to admit,
  // else the reason for the refusal (sent to the client, logged: it must name nothing of this
  // server a stranger should not learn; without the hook every refusal reads the same). Runs on the server thread once
  // per hello, after the job id and service were checked; an exception it throws refuses the
  // client with its message.
  std::function<std::string(const std::string& presented, int rank)> admit;
  Service service = Service::kStore;  // hellos for another service are refused
  std::string name = "server";  // for log lines and errors: "store", "parameter server 1"
  int rank = 0;                  // the hosting rank, for errors
  // Limits on connections that have not authenticated yet (docs/worker-runtime.md, "Connection
  // limits"): a stranger's connections cost a small, bounded share of the process's descriptors
  // and memory, and never the job's own.
  // A connection must complete its hello within this time or it is dropped (a port probe that
  // connects and says nothing must not hold a slot for long). A rank's hello takes milliseconds.
  std::chrono::milliseconds handshake_timeout{5'000};
  // At most this many connections in their handshake at once, and at most this many from one
  // address; a connection beyond either is closed as soon as it is accepted (its client retries
  // until its connect deadline, net/client.h) unless it can evict one (eviction_age).
  // Authenticated connections are not counted.
  std::size_t max_pending_connections = 128;
  std::size_t max_pending_per_address = 64;
  // The job's own connections this server expects (a store: two per member), 0 when unknown. Both
  // pending caps are raised to hold all of them at once beside a stranger's share
  // (pending_caps_for, net/conn_limits.h): a big job's members, slow to finish their handshakes
  // on a loaded machine, never crowd each other out.
  std::size_t expected_clients = 0;
  // A connection over a pending cap takes instead the place of the oldest pending connection the
  // cap counts (of its address, for the per-address cap) that has sent nothing yet, if that one
  // has been in its handshake this long; the oldest is closed. A rank's handshake takes
  // milliseconds, so strangers that keep the caps full of idle connections hold a slot for about
  // this long, not for the whole handshake_timeout, and a rank retrying gets in. A connection
  // that has sent part of its hello is not evicted (the handshake deadline still bounds it).
  std::chrono::milliseconds eviction_age{250};
  // While fewer descriptors than this are free (soft RLIMIT_NOFILE less those open), a new
  // connection is closed as soon as it is accepted, keeping the rest for the job's own files,
  // pipes and connections. When accept itself fails (EMFILE), the server pauses accepting for
  // accept_pause and tries again.
  std::size_t descriptor_reserve = 128;
  std::chrono::milliseconds accept_pause{100};
  // Connections turned away before authenticating are logged as one summary line per interval
  // (counts by kind and addresses), never one line each.
  std::chrono::milliseconds rejection_summary_interval{10'000};
};

// Serves one endpoint on a background thread. Move-only; the destructor stops the thread, calls
// the handler's on_stop and closes every connection.
class FramedServer {
 public:
  // Binds and starts serving; throws NetError naming the endpoint and the system error when it
  // cannot bind. `make_service` is called once, before the thread starts, with the server's
  // io_context (for the service's timers); the server owns what it returns.
  using ServiceFactory = std::function<std::unique_ptr<ServiceHandler>(boost::asio::io_context&)>;
  FramedServer(const ServerOptions& options, const ServiceFactory& make_service);
  ~FramedServer();
  FramedServer(FramedServer&&) noexcept;
  FramedServer& operator=(FramedServer&&) noexcept;
  FramedServer(const FramedServer&) = delete;
  FramedServer& operator=(const FramedServer&) = delete;

  std::uint16_t port() const;
  // Connections dropped so far for failing the handshake or breaking the protocol (for tests).
  std::size_t dropped_connections() const;
  // Connections closed at once on accepting (over a pending cap or the descriptor reserve), and
  // those still in their handshake now (for tests).
  std::size_t turned_away_connections() const;
  std::size_t pending_connections() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddl::net
