#include "net/frame.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace ddl::net {
namespace {

std::uint16_t read_u16(const char* p) {
  return static_cast<std::uint16_t>((static_cast<unsigned char>(p[0]) << 8) |
                                    static_cast<unsigned char>(p[1]));
}

std::uint32_t read_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::uint64_t read_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void append_be(Bytes& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Printable rendering of bytes a peer sent where the magic belongs (a port probe, an HTTP
// request, ...), for the error message.
std::string show_bytes(const char* p, std::size_t n) {
  std::ostringstream os;
  os << '"';
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      os << static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      os << "\\x" << kHex[c >> 4] << kHex[c & 0xf];
    }
  }
  os << '"';
  return os.str();
}

}  // namespace

std::string service_name(Service service) {
  switch (service) {
    case Service::kStore: return "store";
    case Service::kParameterServer: return "parameter server";
  }
  return "service " + std::to_string(static_cast<unsigned>(service));
}

std::string transport_op_name(std::uint8_t op) {
  switch (static_cast<TransportOp>(op)) {
    case TransportOp::kHello: return "hello";
    case TransportOp::kHelloOk: return "hello-ok";
    case TransportOp::kRefused: return "refused";
    case TransportOp::kError: return "error";
    case TransportOp::kChallenge: return "challenge";
  }
  return "op " + std::to_string(static_cast<unsigned>(op));
}

Bytes encode(const Frame& frame) {
  if (frame.job_id.size() > kMaxJobIdBytes) {
    throw ProtocolError(ProtocolErrorKind::kJobIdTooLong,
                        "job id is " + std::to_string(frame.job_id.size()) +
                            " bytes; the protocol allows at most " +
                            std::to_string(kMaxJobIdBytes));
  }
  if (frame.payload.size() > kMaxPayloadBytes) {
    throw ProtocolError(ProtocolErrorKind::kPayloadTooLarge,
                        service_name(frame.service) + " " + transport_op_name(frame.op) +
                            " payload is " + std::to_string(frame.payload.size()) +
                            " bytes; the protocol allows at most " +
                            std::to_string(kMaxPayloadBytes));
  }
  Bytes out;
  out.reserve(kPrefixBytes + frame.job_id.size() + kTrailerBytes + frame.payload.size());
  out.insert(out.end(), kMagic.begin(), kMagic.end());
  append_be(out, kProtocolVersion, 2);
  out.push_back(static_cast<char>(frame.service));
  out.push_back(static_cast<char>(frame.op));
  append_be(out, frame.request_id, 4);
  append_be(out, frame.job_id.size(), 2);
  out.insert(out.end(), frame.job_id.begin(), frame.job_id.end());
  append_be(out, frame.payload.size(), 4);
  out.insert(out.end(), frame.payload.begin(), frame.payload.end());
  return out;
}

// --- FrameDecoder -------------------------------------------------------------------------------

FrameDecoder::FrameDecoder(std::size_t max_payload_bytes)
    : max_payload_bytes_(std::min(max_payload_bytes, kMaxPayloadBytes)) {}

void FrameDecoder::set_max_payload_bytes(std::size_t max_payload_bytes) {
  max_payload_bytes_ = std::min(max_payload_bytes, kMaxPayloadBytes);
}

bool FrameDecoder::mid_frame() const {
  return !error_ && (stage_ != Stage::kPrefix || have_ > 0);
}

DecodeStep FrameDecoder::fail(std::size_t consumed, ProtocolErrorKind kind,
                              const std::string& message) {
  error_.emplace(kind, message);
  DecodeStep step;
  step.consumed = consumed;
  step.error = error_;
  return step;
}

DecodeStep FrameDecoder::feed(const char* data, std::size_t size) {
  if (error_) {
    DecodeStep step;
    step.error = error_;
    return step;
  }
  std::size_t pos = 0;
  while (pos < size) {
    switch (stage_) {
      case Stage::kPrefix: {
        std::size_t n = std::min(kPrefixBytes - have_, size - pos);
        std::memcpy(prefix_.data() + have_, data + pos, n);
        const std::size_t before = have_;
        have_ += n;
        pos += n;
        // Check the magic byte by byte, so a stray peer is refused at its first wrong byte.
        const std::size_t magic_have = std::min(have_, kMagic.size());
        for (std::size_t i = before; i < magic_have; ++i) {
          if (prefix_[i] != kMagic[i]) {
            return fail(pos - (have_ - (i + 1)), ProtocolErrorKind::kBadMagic,
                        "bad frame magic: expected \"DDLS\", got " +
                            show_bytes(prefix_.data(), i + 1));
          }
        }
        if (have_ < kPrefixBytes) break;
        const std::uint16_t version = read_u16(prefix_.data() + 4);
        if (version != kProtocolVersion) {
          return fail(pos, ProtocolErrorKind::kBadVersion,
                      "unsupported protocol version " + std::to_string(version) +
                          ", expected " + std::to_string(kProtocolVersion) +
                          (version < kProtocolVersion
                               ? " (the peer runs an older ddlaunch: use the same build on every "
                                 "node)"
                               : " (the peer runs a newer ddlaunch)"));
        }
        frame_ = Frame{};
        frame_.service = static_cast<Service>(static_cast<std::uint8_t>(prefix_[6]));
        frame_.op = static_cast<std::uint8_t>(prefix_[7]);
        frame_.request_id = read_u32(prefix_.data() + 8);
        job_id_length_ = read_u16(prefix_.data() + 12);
        if (job_id_length_ > kMaxJobIdBytes) {
          return fail(pos, ProtocolErrorKind::kJobIdTooLong,
                      "frame job id is " + std::to_string(job_id_length_) +
                          " bytes, the limit is " + std::to_string(kMaxJobIdBytes));
        }
        frame_.job_id.reserve(job_id_length_);
        have_ = 0;
        stage_ = Stage::kJobId;
        break;
      }
      case Stage::kJobId: {
        std::size_t n = std::min(job_id_length_ - frame_.job_id.size(), size - pos);
        frame_.job_id.append(data + pos, n);
        pos += n;
        if (frame_.job_id.size() == job_id_length_) stage_ = Stage::kTrailer;
        break;
      }
      case Stage::kTrailer: {
        std::size_t n = std::min(kTrailerBytes - have_, size - pos);
        std::memcpy(prefix_.data() + have_, data + pos, n);
        have_ += n;
        pos += n;
        if (have_ < kTrailerBytes) break;
        payload_length_ = read_u32(prefix_.data());
        if (payload_length_ > max_payload_bytes_) {
          return fail(pos, ProtocolErrorKind::kPayloadTooLarge,
                      transport_op_name(frame_.op) + " frame declares a payload of " +
                          std::to_string(payload_length_) + " bytes, the limit here is " +
                          std::to_string(max_payload_bytes_));
        }
        // Reserve what is likely to come, not what was declared: the bytes may never arrive.
        frame_.payload.reserve(std::min<std::size_t>(payload_length_, 64 * 1024));
        have_ = 0;
        stage_ = Stage::kPayload;
        break;
      }
      case Stage::kPayload: {
        std::size_t n = std::min(payload_length_ - frame_.payload.size(), size - pos);
        frame_.payload.insert(frame_.payload.end(), data + pos, data + pos + n);
        pos += n;
        break;
      }
    }
    if (stage_ == Stage::kPayload && frame_.payload.size() == payload_length_) {
      DecodeStep step;
      step.consumed = pos;
      step.frame = std::move(frame_);
      frame_ = Frame{};
      stage_ = Stage::kPrefix;
      have_ = 0;
      return step;
    }
  }
  DecodeStep step;
  step.consumed = pos;
  return step;
}

// --- Payloads -----------------------------------------------------------------------------------

PayloadWriter& PayloadWriter::u8(std::uint8_t v) {
  bytes_.push_back(static_cast<char>(v));
  return *this;
}
PayloadWriter& PayloadWriter::u32(std::uint32_t v) {
  append_be(bytes_, v, 4);
  return *this;
}
PayloadWriter& PayloadWriter::u64(std::uint64_t v) {
  append_be(bytes_, v, 8);
  return *this;
}
PayloadWriter& PayloadWriter::i64(std::int64_t v) { return u64(static_cast<std::uint64_t>(v)); }
PayloadWriter& PayloadWriter::str(std::string_view v) {
  u32(static_cast<std::uint32_t>(v.size()));
  bytes_.insert(bytes_.end(), v.begin(), v.end());
  return *this;
}
PayloadWriter& PayloadWriter::str(const Bytes& v) {
  return str(std::string_view(v.data(), v.size()));
}

const char* PayloadReader::take(std::size_t n, const char* field) {
  if (payload_.size() - pos_ < n) {
    throw ProtocolError(ProtocolErrorKind::kMalformedPayload,
                        what_ + " payload is truncated: " + field + " needs " + std::to_string(n) +
                            " bytes at offset " + std::to_string(pos_) + ", only " +
                            std::to_string(payload_.size() - pos_) + " left");
  }
  const char* p = payload_.data() + pos_;
  pos_ += n;
  return p;
}

std::uint8_t PayloadReader::u8() { return static_cast<std::uint8_t>(*take(1, "u8")); }
std::uint32_t PayloadReader::u32() { return read_u32(take(4, "u32")); }
std::uint64_t PayloadReader::u64() { return read_u64(take(8, "u64")); }
std::int64_t PayloadReader::i64() { return static_cast<std::int64_t>(u64()); }

std::string PayloadReader::str() {
  const std::uint32_t n = u32();
  const char* p = take(n, "string");
  return std::string(p, n);
}

Bytes PayloadReader::bytes() {
  const std::uint32_t n = u32();
  const char* p = take(n, "bytes");
  return Bytes(p, p + n);
}

void PayloadReader::finish() const {
  if (pos_ != payload_.size()) {
    throw ProtocolError(ProtocolErrorKind::kMalformedPayload,
                        what_ + " payload has " + std::to_string(payload_.size() - pos_) +
                            " unexpected trailing bytes");
  }
}

}  // namespace ddl::net
