// The transport's wire format: encoding, incremental decoding across arbitrary chunk boundaries,
// and the typed errors for every kind of bad input (old protocol versions included).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/bytes.h"
#include "net/frame.h"

namespace ddl::net {
namespace {

using ddl::testing::bytes;

// Ops for the tests: the transport's own, and two a service might define.
constexpr std::uint8_t kHello = static_cast<std::uint8_t>(TransportOp::kHello);
constexpr std::uint8_t kServiceOp = kFirstServiceOp;
constexpr std::uint8_t kReplyOp = 64;

Frame make(std::uint8_t op, const std::string& job_id, Bytes payload = {},
           std::uint32_t request_id = 0, Service service = Service::kStore) {
  return Frame{service, op, request_id, job_id, std::move(payload)};
}

Bytes encode(std::uint8_t op, const std::string& job_id, const Bytes& payload) {
  return net::encode(make(op, job_id, payload));
}

// Feeds `input` to `decoder` in chunks of `chunk` bytes; collects frames, stops at an error.
struct Decoded {
  std::vector<Frame> frames;
  std::optional<ProtocolError> error;
  std::size_t consumed = 0;
};

Decoded decode_in_chunks(FrameDecoder& decoder, const Bytes& input, std::size_t chunk) {
  Decoded out;
  for (std::size_t begin = 0; begin < input.size(); begin += chunk) {
    const std::size_t end = std::min(input.size(), begin + chunk);
    std::size_t pos = begin;
    while (pos < end) {
      DecodeStep step = decoder.feed(input.data() + pos, end - pos);
      pos += step.consumed;
      out.consumed += step.consumed;
      if (step.error) {
        out.error = step.error;
        return out;
      }
      if (step.frame) {
        out.frames.push_back(std::move(*step.frame));
      } else if (step.consumed == 0) {
        ADD_FAILURE() << "decoder made no progress";
        return out;
      }
    }
  }
  return out;
}

Decoded decode_all(const Bytes& input, std::size_t max_payload = kMaxPayloadBytes) {
  FrameDecoder decoder(max_payload);
  return decode_in_chunks(decoder, input, input.size() + 1);
}

void set_u16(Bytes& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<char>(v >> 8);
  b[at + 1] = static_cast<char>(v & 0xff);
}

void set_payload_length(Bytes& frame_bytes, std::size_t job_id_length, std::uint32_t v) {
  const std::size_t at = kPrefixBytes + job_id_length;
  for (int i = 0; i < 4; ++i) frame_bytes[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

TEST(FrameTest, FramesSurviveEveryChunkBoundary) {
  const Bytes binary{'\0', '\xff', 'D', 'D', 'L', 'S', '\n'};
  const std::vector<Frame> sent{
      make(kHello, "job-a", PayloadWriter().u32(3).u32(4).str("secret").take()),
      make(kServiceOp, "job-a", PayloadWriter().str("key").str(binary).take(), 7),
      make(kReplyOp, "", {}, 0xfffffffeu, Service::kParameterServer),
      make(kReplyOp, std::string(kMaxJobIdBytes, 'j'), PayloadWriter().i64(-42).take(), 9),
  };
  Bytes stream;
  for (const auto& f : sent) {
    Bytes b = net::encode(f);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  for (std::size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    FrameDecoder decoder;
    Decoded d = decode_in_chunks(decoder, stream, chunk);
    ASSERT_FALSE(d.error) << "chunk " << chunk << ": " << d.error->what();
    ASSERT_EQ(d.frames.size(), sent.size()) << "chunk " << chunk;
    for (std::size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(d.frames[i].op, sent[i].op);
      EXPECT_EQ(d.frames[i].service, sent[i].service);
      EXPECT_EQ(d.frames[i].request_id, sent[i].request_id);
      EXPECT_EQ(d.frames[i].job_id, sent[i].job_id);
      EXPECT_EQ(d.frames[i].payload, sent[i].payload);
    }
    EXPECT_FALSE(decoder.mid_frame());
  }
}

TEST(FrameTest, FeedStopsAtTheEndOfEachFrame) {
  Bytes two = encode(kReplyOp, "j", {});
  const std::size_t one_size = two.size();
  Bytes second = encode(kServiceOp, "j", Bytes{'\1'});
  two.insert(two.end(), second.begin(), second.end());
  FrameDecoder decoder;
  DecodeStep step = decoder.feed(two.data(), two.size());
  ASSERT_TRUE(step.frame);
  EXPECT_EQ(step.consumed, one_size);
  step = decoder.feed(two.data() + one_size, two.size() - one_size);
  ASSERT_TRUE(step.frame);
  EXPECT_EQ(step.frame->op, kServiceOp);
}

TEST(FrameTest, BadMagicIsRefusedAtTheFirstWrongByte) {
  Decoded d = decode_all(bytes("GET / HTTP/1.1\r\n"));
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->kind(), ProtocolErrorKind::kBadMagic);
  EXPECT_EQ(d.consumed, 1u);
  EXPECT_NE(std::string(d.error->what()).find("expected \"DDLS\", got \"G\""), std::string::npos)
      << d.error->what();

  FrameDecoder byte_by_byte;
  Decoded d2 = decode_in_chunks(byte_by_byte, bytes("DDLX...."), 1);
  ASSERT_TRUE(d2.error);
  EXPECT_EQ(d2.error->kind(), ProtocolErrorKind::kBadMagic);
  EXPECT_EQ(d2.consumed, 4u);
}

TEST(FrameTest, OtherProtocolVersionIsRefused) {
  Bytes b = encode(kReplyOp, "job", {});
  set_u16(b, 4, kProtocolVersion + 1);
  Decoded d = decode_all(b);
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->kind(), ProtocolErrorKind::kBadVersion);
  EXPECT_NE(std::string(d.error->what()).find("version 4, expected 3"), std::string::npos)
      << d.error->what();
}

TEST(FrameTest, AVersionOneFrameIsRefusedAsAnOlderPeer) {
  // What a version 1 store client sent first: magic, version 1, job id, op hello, payload.
  Bytes v1{'D', 'D', 'L', 'S', 0, 1, 0, 3, 'j', 'o', 'b', 1, 0, 0, 0, 0};
  Decoded d = decode_all(v1);
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->kind(), ProtocolErrorKind::kBadVersion);
  const std::string what = d.error->what();
  EXPECT_NE(what.find("version 1, expected 3"), std::string::npos) << what;
  EXPECT_NE(what.find("older ddlaunch"), std::string::npos) << what;
}

TEST(FrameTest, OversizedPayloadIsRefusedFromTheHeaderAlone) {
  Bytes b = encode(kHello, "job", {});
  set_payload_length(b, 3, kMaxHelloPayloadBytes + 1);  // no payload bytes follow
  Decoded d = decode_all(b, kMaxHelloPayloadBytes);
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->kind(), ProtocolErrorKind::kPayloadTooLarge);
  EXPECT_EQ(d.consumed, b.size());

  set_payload_length(b, 3, 0xffffffffu);
  d = decode_all(b);
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->kind(), ProtocolErrorKind::kPayloadTooLarge);
}

TEST(FrameTest, RaisingTheCapAdmitsLargerPayloads) {
  Bytes payload(kMaxHelloPayloadBytes + 10, 'x');
  Bytes b = encode(kServiceOp, "job", payload);
  FrameDecoder decoder(kMaxHelloPayloadBytes);
  decoder.set_max_payload_bytes(kMaxPayloadBytes);
  Decoded d = decode_in_chunks(decoder, b, 1000);
  ASSERT_FALSE(d.error);
  ASSERT_EQ(d.frames.size(), 1u);
  EXPECT_EQ(d.frames[0].payload, payload);
  decoder.set_max_payload_bytes(kMaxPayloadBytes * 4);
  EXPECT_EQ(decoder.max_payload_bytes(), kMaxPayloadBytes);
}

TEST(FrameTest, LongJobIdIsRefused) {
  Bytes b = encode(kReplyOp, "job", {});
  set_u16(b, 12, kMaxJobIdBytes + 1);
  Decoded d = decode_all(b);
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->kind(), ProtocolErrorKind::kJobIdTooLong);
  EXPECT_THROW(encode(kReplyOp, std::string(kMaxJobIdBytes + 1, 'j'), {}), ProtocolError);
}

TEST(FrameTest, EncodeRefusesOversizedPayloads) {
  EXPECT_THROW(encode(kServiceOp, "job", Bytes(kMaxPayloadBytes + 1)), ProtocolError);
}

TEST(FrameTest, DecoderStaysFailedAfterAnError) {
  FrameDecoder decoder;
  Bytes junk = bytes("xx");
  DecodeStep first = decoder.feed(junk.data(), junk.size());
  ASSERT_TRUE(first.error);
  Bytes good = encode(kReplyOp, "job", {});
  DecodeStep again = decoder.feed(good.data(), good.size());
  ASSERT_TRUE(again.error);
  EXPECT_EQ(again.consumed, 0u);
  EXPECT_FALSE(again.frame);
  EXPECT_TRUE(decoder.failed());
}

TEST(FrameTest, MidFrameTellsAPartialFrameFromABoundary) {
  Bytes b = encode(kServiceOp, "job", PayloadWriter().str("k").str("v").take());
  FrameDecoder decoder;
  EXPECT_FALSE(decoder.mid_frame());
  decoder.feed(b.data(), 1);
  EXPECT_TRUE(decoder.mid_frame());
  DecodeStep step = decoder.feed(b.data() + 1, b.size() - 1);
  ASSERT_TRUE(step.frame);
  EXPECT_FALSE(decoder.mid_frame());
}

TEST(FrameTest, PayloadReaderChecksLengths) {
  Bytes p = PayloadWriter().str("key").u64(7).i64(-1).u8(1).take();
  PayloadReader r(p, "test");
  EXPECT_EQ(r.str(), "key");
  EXPECT_EQ(r.u64(), 7u);
  EXPECT_EQ(r.i64(), -1);
  EXPECT_EQ(r.u8(), 1);
  EXPECT_NO_THROW(r.finish());

  Bytes truncated = PayloadWriter().u32(1000).take();  // claims a 1000-byte string
  PayloadReader t(truncated, "get");
  try {
    t.str();
    FAIL() << "read past the end";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.kind(), ProtocolErrorKind::kMalformedPayload);
    EXPECT_NE(std::string(e.what()).find("get payload is truncated"), std::string::npos);
  }

  Bytes extra = PayloadWriter().u8(1).u8(2).take();
  PayloadReader x(extra, "bool");
  x.u8();
  EXPECT_THROW(x.finish(), ProtocolError);
}

}  // namespace
}  // namespace ddl::net
