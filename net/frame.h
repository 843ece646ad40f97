// The wire format every TCP service of a job speaks (the rendezvous store, and any later service
// such as a parameter server): one framing, one handshake, one secret check, one set of size caps.
//
// Every message, both ways, is one frame (integers big-endian):
//
//   magic       4 bytes  "DDLS"
//   version     u16      kProtocolVersion (3; older frames are refused with a message naming both
//                        versions: version 2 sent the secret itself in the hello)
//   service     u8       a `Service`: which service the frame is for
//   op          u8       what the frame asks or answers: the transport's own ops below
//                        (kFirstServiceOp and up belong to the service)
//   request id  u32      chosen by the client, echoed by the reply (0 for the handshake)
//   job id len  u16      at most kMaxJobIdBytes
//   job id      bytes
//   payload len u32      at most the decoder's cap (kMaxPayloadBytes; kMaxHelloPayloadBytes before
//                        the handshake, so an unauthenticated peer cannot make the server buffer
//                        much)
//   payload     bytes    op-specific, written with PayloadWriter / read with PayloadReader
//
// The handshake (net/auth.h): on connecting, the server sends a challenge (a fresh nonce, no job
// id); the client answers with a hello proving the job secret over that nonce, its job id,
// service and rank; the server answers hello-ok (with its own proof) or refused (a fixed reason,
// no job id) and closes.
//
// `FrameDecoder` is a pure, incremental decoder: no I/O, no allocation beyond the frame it is
// assembling, and any input (including hostile bytes split at any boundary) yields either frames or
// one typed ProtocolError, never a crash. It is the entry point the fuzzer calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddl::net {

using Bytes = std::vector<char>;

// A transport failure: the peer cannot be reached, refused us, broke the protocol or went silent.
// The message names the endpoint and what was expected.
class NetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::array<char, 4> kMagic{'D', 'D', 'L', 'S'};
inline constexpr std::uint16_t kProtocolVersion = 3;
inline constexpr std::size_t kMaxJobIdBytes = 256;
// Largest payload once a connection has completed the handshake (a value plus its key).
inline constexpr std::size_t kMaxPayloadBytes = std::size_t{64} << 20;
// Largest payload a connection may send before its hello was accepted.
inline constexpr std::size_t kMaxHelloPayloadBytes = 4096;
// Bytes before the job id (magic, version, service, op, request id, job id length), and between
// the job id and the payload (payload length).
inline constexpr std::size_t kPrefixBytes = 14;
inline constexpr std::size_t kTrailerBytes = 4;
// Largest frame on the wire.
inline constexpr std::size_t kMaxFrameBytes =
    kPrefixBytes + kMaxJobIdBytes + kTrailerBytes + kMaxPayloadBytes;

// The services of a job. A server serves one; a client names it in every frame, and a hello for
// another service is refused.
enum class Service : std::uint8_t {
  kStore = 1,
  kParameterServer = 2,
};
std::string service_name(Service service);  // "store", "parameter server", "service 9"

// The transport's own ops, the same for every service.
enum class TransportOp : std::uint8_t {
  kHello = 1,      // client -> server: u32 rank, u32 world size, str proof (or an admit hook's
                   // credential), str client nonce
  kHelloOk = 2,    // str server proof (empty when the server has no secret)
  kRefused = 3,    // str reason; the server closes the connection after it
  kError = 4,      // str message: the request failed, the connection stays usable
  kChallenge = 5,  // server -> client, first on every connection: str nonce
};
// Ops from here up are the service's own.
inline constexpr std::uint8_t kFirstServiceOp = 16;

// "hello", "hello-ok", "refused", "error"; "op N" for a service's op.
std::string transport_op_name(std::uint8_t op);

enum class ProtocolErrorKind {
  kBadMagic,
  kBadVersion,
  kJobIdTooLong,
  kUnknownOp,         // an op the service does not know
  kWrongService,      // a frame for another service than the connection's
  kPayloadTooLarge,
  kMalformedPayload,  // a frame whose payload does not parse as its op requires
};

// A peer broke the protocol. The message says what was expected and what was seen.
class ProtocolError : public NetError {
 public:
  ProtocolError(ProtocolErrorKind kind, const std::string& message)
      : NetError(message), kind_(kind) {}
  ProtocolErrorKind kind() const { return kind_; }

 private:
  ProtocolErrorKind kind_;
};

struct Frame {
  Service service = Service::kStore;
  std::uint8_t op = 0;
  std::uint32_t request_id = 0;
  std::string job_id;
  Bytes payload;
};

// The whole frame as bytes. Throws ProtocolError (kJobIdTooLong / kPayloadTooLarge) when the
// job id or payload exceed the protocol's limits.
Bytes encode(const Frame& frame);

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

}  // namespace ddl::net
