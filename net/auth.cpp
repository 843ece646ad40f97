#include "net/auth.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddl::net {
namespace {

constexpr std::array<std::uint32_t, 64> kRoundConstants{
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// Incremental SHA-256: feed bytes, then finish once.
class Sha256 {
 public:
  void update(std::string_view data) {
    for (char c : data) {
      block_[fill_++] = static_cast<unsigned char>(c);
      if (fill_ == block_.size()) {
        compress();
        fill_ = 0;
      }
    }
    bits_ += static_cast<std::uint64_t>(data.size()) * 8;
  }

  Digest finish() {
    const std::uint64_t total_bits = bits_;
    // Padding: one 1 bit, zeros up to 56 bytes mod 64, then the length in bits, big-endian.
    block_[fill_++] = 0x80;
    if (fill_ > 56) {
      while (fill_ < 64) block_[fill_++] = 0;
      compress();
      fill_ = 0;
    }
    while (fill_ < 56) block_[fill_++] = 0;
    for (int i = 7; i >= 0; --i)
      block_[fill_++] = static_cast<unsigned char>(total_bits >> (8 * i));
    compress();
    Digest out{};
    for (std::size_t i = 0; i < 8; ++i) {
      for (std::size_t j = 0; j < 4; ++j) {
        out[4 * i + j] = static_cast<unsigned char>(state_[i] >> (24 - 8 * j));
      }
    }
    return out;
  }

 private:
  void compress() {
    std::array<std::uint32_t, 64> w{};
    for (std::size_t i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t{block_[4 * i]} << 24) | (std::uint32_t{block_[4 * i + 1]} << 16) |
             (std::uint32_t{block_[4 * i + 2]} << 8) | std::uint32_t{block_[4 * i + 3]};
    }
    for (std::size_t i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (std::size_t i = 0; i < 64; ++i) {
      const std::uint32_t big_e = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const std::uint32_t choose = (e & f) ^ (~e & g);
      const std::uint32_t t1 = h + big_e + choose + kRoundConstants[i] + w[i];
      const std::uint32_t big_a = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = big_a + majority;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  std::array<std::uint32_t, 8> state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  std::size_t fill_ = 0;
  std::uint64_t bits_ = 0;
};

std::string_view view(const Digest& d) {
  return std::string_view(reinterpret_cast<const char*>(d.data()), d.size());
}

// The fields both proofs cover, each length-prefixed so no two bindings share bytes.
std::string binding_bytes(std::string_view label, const HelloBinding& b) {
  PayloadWriter w;
  w.str(label)
      .str(b.server_nonce)
      .str(b.client_nonce)
      .str(b.job_id)
      .u8(static_cast<std::uint8_t>(b.service))
      .u32(static_cast<std::uint32_t>(b.rank))
      .u32(static_cast<std::uint32_t>(b.world_size));
  const Bytes bytes = w.take();
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

Digest sha256(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

Digest hmac_sha256(std::string_view key, std::string_view message) {
  std::array<unsigned char, 64> block{};
  if (key.size() > block.size()) {
    const Digest hashed = sha256(key);
    std::memcpy(block.data(), hashed.data(), hashed.size());
  } else {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::string inner_pad(64, '\0'), outer_pad(64, '\0');
  for (std::size_t i = 0; i < 64; ++i) {
    inner_pad[i] = static_cast<char>(block[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(block[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(inner_pad);
  inner.update(message);
  const Digest inner_digest = inner.finish();
  Sha256 outer;
  outer.update(outer_pad);
  outer.update(view(inner_digest));
  return outer.finish();
}

std::string to_hex(const Digest& digest) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : digest) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  std::size_t have = 0;
  while (have < n) {
    const ssize_t got = ::getrandom(out.data() + have, n - have, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw NetError(std::string("cannot read random bytes for the handshake: ") +
                     std::strerror(errno));
    }
    have += static_cast<std::size_t>(got);
  }
  return out;
}

std::string client_proof(std::string_view secret, const HelloBinding& binding) {
  return std::string(view(hmac_sha256(secret, binding_bytes("ddl-hello", binding))));
}

std::string server_proof(std::string_view secret, const HelloBinding& binding) {
  return std::string(view(hmac_sha256(secret, binding_bytes("ddl-welcome", binding))));
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace ddl::net
