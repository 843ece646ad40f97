// libFuzzer target: the transport's frame decoder and the store's payload readers on hostile bytes.
// Any input must yield frames or a ProtocolError; a crash, hang or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "net/frame.h"
#include "store/protocol.h"

using namespace ddl::net;
using ddl::store_protocol::Op;

namespace {

// Reads the payload the way the server would for the frame's op; malformed payloads throw.
void read_payload(const Frame& f) {
  PayloadReader r(f.payload, ddl::store_protocol::op_name(f.op));
  if (f.op == static_cast<std::uint8_t>(TransportOp::kHello)) {
    r.u32();
    r.u32();
    r.str();  // the proof (or an admit hook's credential)
    r.str();  // the client's nonce
    r.finish();
    return;
  }
  switch (static_cast<Op>(f.op)) {
    case Op::kSet: r.str(); r.bytes(); break;
    case Op::kGet: r.str(); r.u64(); break;
    case Op::kAdd: r.str(); r.i64(); break;
    case Op::kCheck:
    case Op::kWait: {
      std::uint32_t n = r.u32();
      for (std::uint32_t i = 0; i < n; ++i) r.str();
      if (f.op == static_cast<std::uint8_t>(Op::kWait)) r.u64();
      break;
    }
    case Op::kCompareSet: r.str(); if (r.u8() != 0) r.bytes(); r.bytes(); break;
    case Op::kDelete: r.str(); break;
    case Op::kMultiSet: {
      std::uint32_t n = r.u32();
      for (std::uint32_t i = 0; i < n; ++i) {
        r.str();
        r.bytes();
      }
      break;
    }
    case Op::kMultiGet: {
      std::uint32_t n = r.u32();
      for (std::uint32_t i = 0; i < n; ++i) r.str();
      r.u64();
      break;
    }
    default: return;
  }
  r.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the chunk size, so frames split at every boundary get exercised.
  const std::size_t chunk = 1 + data[0] % 17;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  std::size_t left = size - 1;
  FrameDecoder decoder(kMaxHelloPayloadBytes);
  while (left > 0) {
    std::size_t n = left < chunk ? left : chunk;
    std::size_t fed = 0;
    while (fed < n) {
      DecodeStep step = decoder.feed(bytes + fed, n - fed);
      if (step.error) return 0;
      if (step.frame) {
        try {
          read_payload(*step.frame);
        } catch (const ProtocolError&) {
        }
        decoder.set_max_payload_bytes(1 << 16);
      }
      if (step.consumed == 0 && !step.frame) break;
      fed += step.consumed;
    }
    bytes += n;
    left -= n;
  }
  return 0;
}
