// The parameter server's ops on the framed transport (net/frame.h, service kParameterServer) and
// the tensor payload both directions use. Internal to worker/ps.
//
//   register    trainer -> server: u8 mode, u32 trainers, u32 servers, u32 server index,
//               u32 n, n x u64 element count (the tensors of this server's shard, in order)
//   registered  u64 version, str saved position of this trainer ("" when none)
//   push        the trainer's gradients of the shard (tensors) -> params
//   pull        (empty) -> params
//   params      u64 version, u64 staleness of the push answered (0 for pull/finish), tensors
//   save        str position (opaque to the server) -> saved
//   saved       u64 version written
//   finish      (empty) -> params, once every trainer has finished
//
// tensors: u32 n, then per tensor u64 element count and str raw float32 bytes (element order of a
// contiguous tensor of the parameter's shape).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "net/frame.h"

namespace ddl::ps::protocol {

enum class Op : std::uint8_t {
  kRegister = net::kFirstServiceOp,
  kRegistered,
  kPush,
  kPull,
  kParams,
  kSave,
  kSaved,
  kFinish,
};

inline std::uint8_t byte(Op op) { return static_cast<std::uint8_t>(op); }
std::string op_name(std::uint8_t op);

// Writes `tensors` (float32, any device or layout) as the tensor payload.
void write_tensors(net::PayloadWriter& w, const std::vector<torch::Tensor>& tensors);

// Reads a tensor payload whose element counts must equal `numels` (in order); returns CPU float32
// contiguous tensors of those counts (flat). Throws net::ProtocolError (kMalformedPayload,
// naming `what`) on a count or size mismatch.
std::vector<torch::Tensor> read_tensors(net::PayloadReader& r,
                                        const std::vector<std::int64_t>& numels,
                                        const std::string& what);

}  // namespace ddl::ps::protocol
