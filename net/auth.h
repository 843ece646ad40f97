// The handshake's proof of the job secret (net/frame.h): a challenge and response, so the secret
// itself never crosses the wire and a captured hello is worth nothing later.
//
//   server -> client  challenge: a fresh random nonce per connection (kNonceBytes)
//   client -> server  hello: rank, world size, client nonce, and
//                     proof = HMAC-SHA-256(secret, "ddl-hello" | server nonce | client nonce |
//                                          job id | service | rank | world size)
//   server -> client  hello-ok: HMAC-SHA-256(secret, "ddl-welcome" | the same fields), so the
//                     client knows the server holds the secret too
//
// The job id carries the generation ("<id>-g<K>"), so a proof binds the job, the generation, the
// service, the rank and this one connection. SHA-256 (FIPS 180-4) and HMAC (RFC 2104) are written
// here; tests/net/auth_test.cpp checks them against the FIPS and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "net/frame.h"

namespace ddl::net {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kDigestBytes = 32;
using Digest = std::array<unsigned char, kDigestBytes>;

// SHA-256 of `data` (FIPS 180-4).
Digest sha256(std::string_view data);
// HMAC-SHA-256 of `message` under `key` (RFC 2104; keys longer than 64 bytes are hashed first).
Digest hmac_sha256(std::string_view key, std::string_view message);
// Lower-case hex of a digest, for tests and logs.
std::string to_hex(const Digest& digest);

// `n` bytes from the kernel's random source (getrandom). Throws NetError when it fails.
std::string random_bytes(std::size_t n);

// What a hello proves and who it names; both sides build the same bytes from it.
struct HelloBinding {
  std::string server_nonce;
  std::string client_nonce;
  std::string job_id;
  Service service = Service::kStore;
  std::int32_t rank = 0;
  std::int32_t world_size = 0;
};

// The client's proof that it holds `secret` (kDigestBytes raw bytes).
std::string client_proof(std::string_view secret, const HelloBinding& binding);
// The server's answer proving it holds `secret` too.
std::string server_proof(std::string_view secret, const HelloBinding& binding);

// Compares without an early exit, so the time taken does not reveal how much of a guess was
// right.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace ddl::net
