// Wire protocol of the TCP rendezvous store.
//
// Every message, both ways, is one frame (integers big-endian):
//
//   magic       4 bytes  "DDLS"
//   version     u16      kProtocolVersion
//   job id len  u16      at most kMaxJobIdBytes
//   job id      bytes
//   op          u8       an `Op`
//   payload len u32      at most the decoder's cap (kMaxPayloadBytes; kMaxHelloPayloadBytes before
//                        the handshake, so an unauthenticated peer cannot make the server buffer
//                        much)
//   payload     bytes    op-specific, written with PayloadWriter / read with PayloadReader
//
// `FrameDecoder` is a pure, incremental decoder: no I/O, no allocation beyond the frame it is
// assembling, and any input (including hostile bytes split at any boundary) yields either frames or
// one typed ProtocolError, never a crash. It is the entry point the fuzzer calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "store/store.h"

namespace ddl::frame {

inline constexpr std::array<char, 4> kMagic{'D', 'D', 'L', 'S'};
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kMaxJobIdBytes = 256;
// Largest payload once a connection has completed the handshake (a value plus its key).
inline constexpr std::size_t kMaxPayloadBytes = std::size_t{64} << 20;
// Largest payload a connection may send before its hello was accepted.
inline constexpr std::size_t kMaxHelloPayloadBytes = 4096;
// Bytes before the job id, and between the job id and the payload.
inline constexpr std::size_t kPrefixBytes = 8;   // magic, version, job id length
inline constexpr std::size_t kTrailerBytes = 5;  // op, payload length
// Largest frame on the wire.
inline constexpr std::size_t kMaxFrameBytes =
    kPrefixBytes + kMaxJobIdBytes + kTrailerBytes + kMaxPayloadBytes;

enum class Op : std::uint8_t {
  // Requests (client -> server). Payloads:
  kHello = 1,  // u32 rank, u32 world size, str secret
  kSet = 2,    // str key, str value
  kGet = 3,    // str key, u64 timeout ms
  kAdd = 4,    // str key, i64 delta
  kCheck = 5,  // u32 n, n x str key
  kWait = 6,   // u32 n, n x str key, u64 timeout ms
  // Replies (server -> client).
  kHelloOk = 64,  // (empty)
  kRefused = 65,  // str reason; the server closes the connection after it
  kOk = 66,       // (empty)
  kValue = 67,    // str value
  kInteger = 68,  // i64
  kBool = 69,     // u8 0|1
  kTimeout = 70,  // u32 n, n x str missing key
  kError = 71,    // str message (the request failed; the connection stays usable)
};

bool is_known_op(std::uint8_t op);
// "set", "get", ... ("op 17" for unknown values).
std::string op_name(Op op);

enum class ProtocolErrorKind {
  kBadMagic,
  kBadVersion,
  kJobIdTooLong,
  kUnknownOp,
  kPayloadTooLarge,
  kMalformedPayload,  // a frame whose payload does not parse as its op requires
};

// A peer broke the protocol. The message says what was expected and what was seen.
class ProtocolError : public StoreError {
 public:
  ProtocolError(ProtocolErrorKind kind, const std::string& message)
      : StoreError(message), kind_(kind) {}
  ProtocolErrorKind kind() const { return kind_; }

 private:
  ProtocolErrorKind kind_;
};

struct Frame {
  Op op = Op::kOk;
  std::string job_id;
  Bytes payload;
};

// The whole frame as bytes. Throws ProtocolError (kJobIdTooLong / kPayloadTooLarge) when the
// job id or payload exceed the protocol's limits.
Bytes encode(Op op, std::string_view job_id, const Bytes& payload);

// Result of one FrameDecoder::feed call.
struct DecodeStep {
  std::size_t consumed = 0;            // bytes of the input used; the rest belongs to later calls
  std::optional<Frame> frame;          // a complete frame, when this call finished one
  std::optional<ProtocolError> error;  // set once the input broke the protocol
};

// Assembles frames from a byte stream delivered in chunks of any size.
// Not thread-safe; one decoder per connection.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_payload_bytes = kMaxPayloadBytes);

  // Consumes input up to the end of at most one frame: call again with the unconsumed rest.
  // After an error the decoder stays failed: every later call returns the same error and
  // consumes nothing.
  DecodeStep feed(const char* data, std::size_t size);

  // Cap for payloads of frames whose header has not been read yet (raised after a handshake).
  // Never above kMaxPayloadBytes.
  void set_max_payload_bytes(std::size_t max_payload_bytes);
  std::size_t max_payload_bytes() const { return max_payload_bytes_; }

  // True when some bytes of an unfinished frame are buffered (a peer closing now cut a frame).
  bool mid_frame() const;
  bool failed() const { return error_.has_value(); }

 private:
  enum class Stage { kPrefix, kJobId, kTrailer, kPayload };

  DecodeStep fail(std::size_t consumed, ProtocolErrorKind kind, const std::string& message);

  std::size_t max_payload_bytes_;
  Stage stage_ = Stage::kPrefix;
  std::array<char, kPrefixBytes> prefix_{};  // also reused for the trailer
  std::size_t have_ = 0;                     // bytes of the current stage read so far
  std::size_t job_id_length_ = 0;
  std::size_t payload_length_ = 0;
  Frame frame_;
  std::optional<ProtocolError> error_;
};

// Builds a payload. Strings are written as u32 length + bytes.
class PayloadWriter {
 public:
  PayloadWriter& u8(std::uint8_t v);
  PayloadWriter& u32(std::uint32_t v);
  PayloadWriter& u64(std::uint64_t v);
  PayloadWriter& i64(std::int64_t v);
  PayloadWriter& str(std::string_view v);
  PayloadWriter& str(const Bytes& v);
  Bytes take() { return std::move(bytes_); }
  std::size_t size() const { return bytes_.size(); }

 private:
  Bytes bytes_;
};

// Reads a payload written by PayloadWriter. Every reader throws ProtocolError
// (kMalformedPayload, naming `what`) when the payload is too short; finish() throws when bytes
// are left over.
class PayloadReader {
 public:
  PayloadReader(const Bytes& payload, std::string what) : payload_(payload), what_(std::move(what)) {}
  std::uint8_t u8();
  std::uint32_t u32();
  std::uint64_t u64();
  std::int64_t i64();
  std::string str();
  Bytes bytes();
  void finish() const;

 private:
  const char* take(std::size_t n, const char* field);

  const Bytes& payload_;
  std::string what_;
  std::size_t pos_ = 0;
};

}  // namespace ddl::frame
