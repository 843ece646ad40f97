// A client of etcd's v3 API through its gRPC gateway (HTTP/1.1 + JSON, `POST /v3/...`), over
// Boost.Beast, over TLS when asked and with etcd's user authentication: what the etcd control
// store (launcher/coord/control_store.h) needs of etcd, no more. Keys and values are byte
// strings (base64 on the wire, as the gateway wants); int64 fields travel as JSON strings.
//
// Endpoints are the cluster members' client URLs as HOST:PORT, tried in order: a request that
// cannot reach the current member (refused, reset, no reply within request_timeout) is retried
// on the next, and EtcdUnreachable names every endpoint tried once none answered. Retrying is
// safe for what the control plane sends: puts of whole values, deletes, and transactions whose
// compares make a repeat harmless.
//
// One Client is one connection (kept open between requests) and is used by one thread at a time;
// a thread that blocks in watch() uses a Client of its own (clone()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "env/contract.h"
#include "env/error.h"

namespace ddl::etcd {

// Any etcd failure: an error reply (its code and message quoted), a reply that cannot be
// decoded, or a member that stopped answering in the middle of a request. Exit code kExitParallel.
class EtcdError : public Error {
 public:
  explicit EtcdError(const std::string& what) : Error(kExitParallel, "etcd", what) {}
};

// No endpoint answered; the message names every endpoint tried and the last reason.
class EtcdUnreachable : public EtcdError {
 public:
  using EtcdError::EtcdError;
};

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
};

// One comparison of a transaction (etcd's Compare): the key's version, create or mod revision,
// or value against a number or a value.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  std::int64_t number = 0;  // for every target but kValue
  std::string value;        // for kValue

  // The key does not exist.
  static Compare absent(std::string key);
  // The key exists and holds `value`.
  static Compare value_is(std::string key, std::string value);
  // The key was last written at `revision` (0: does not exist).
  static Compare mod_revision_is(std::string key, std::int64_t revision);
};

// One operation of a transaction (etcd's RequestOp).
struct Op {
  enum class Kind { kPut, kRange, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;    // kPut
  bool prefix = false;  // kRange, kDelete: every key starting with `key`

  static Op put(std::string key, std::string value);
  static Op get(std::string key);
  static Op get_prefix(std::string prefix);
  static Op erase(std::string key);
  static Op erase_prefix(std::string prefix);
};

struct TxnResult {
  bool succeeded = false;  // the compares held: the success ops ran (else the failure ops)
  std::int64_t revision = 0;
  // One entry per kRange op that ran, in order: the keys it found.
  std::vector<std::vector<KeyValue>> ranges;
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key
  std::int64_t revision = 0;  // the store's revision when it was read
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for kDelete: the key and its mod_revision (the deletion's revision)
};

struct WatchResult {
  std::vector<WatchEvent> events;  // empty: the timeout passed first
  // The revision to watch from next time (the last event's + 1, or the one asked for; for a
  // watch from 0, "from now", the revision after the member's current one when it started).
  std::int64_t next_revision = 0;
};

// TLS to the members (etcd's --cert-file/--key-file, and --client-cert-auth for the client's own).
struct TlsOptions {
  bool enabled = false;
  std::string ca_file;    // the CA that signed the members' certificates (empty: the system's)
  std::string cert_file;  // this client's certificate (PEM), when the members ask for one
  std::string key_file;   // and its key (PEM)
};

struct ClientOptions {
  ClientOptions() = default;
  ClientOptions(std::vector<env::Endpoint> e, std::chrono::milliseconds timeout)
      : endpoints(std::move(e)), request_timeout(timeout) {}

  std::vector<env::Endpoint> endpoints;  // at least one
  // A request's deadline on one member, connect included, before the next is tried.
  std::chrono::milliseconds request_timeout{2'000};
  TlsOptions tls;
  // Not empty: etcd's authentication (etcd's `auth enable`): the client asks the current member
  // for a token with this user's password and presents it on every request, again when it
  // expired.
  std::string user;
  std::string password;
};

class Client {
 public:
  // Connects lazily (the first request). Throws EtcdError for an empty endpoint list.
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Another client of the same cluster with the same options (a connection of its own).
  std::unique_ptr<Client> clone() const;

  std::optional<KeyValue> get(const std::string& key);
  RangeResult get_prefix(const std::string& prefix);
  // Returns the revision of the write.
  std::int64_t put(const std::string& key, const std::string& value);
  // Returns how many keys were deleted.
  std::int64_t erase(const std::string& key);
  std::int64_t erase_prefix(const std::string& prefix);
  TxnResult txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                const std::vector<Op>& failure = {});

  // The events on `key` (with `prefix`: on every key starting with it) from revision
  // `from_revision` on, waiting up to `timeout` for the first; returns what arrived by then
  // (events that share the first one's revision come with it). Throws EtcdError when
  // `from_revision` was compacted away (the caller reads the current state again).
  WatchResult watch(const std::string& key, bool prefix, std::int64_t from_revision,
                    std::chrono::milliseconds timeout);

  // "HOST:PORT, HOST:PORT, ..." for messages.
  std::string endpoints_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ClientOptions options_;
};

}  // namespace ddl::etcd
