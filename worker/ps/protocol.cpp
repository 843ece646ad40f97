#include "worker/ps/protocol.h"

#include <cstring>
#include <string_view>

namespace ddl::ps::protocol {

std::string op_name(std::uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::kRegister: return "register";
    case Op::kRegistered: return "registered";
    case Op::kPush: return "push";
    case Op::kPull: return "pull";
    case Op::kParams: return "params";
    case Op::kSave: return "save";
    case Op::kSaved: return "saved";
    case Op::kFinish: return "finish";
  }
  return net::transport_op_name(op);
}

void write_tensors(net::PayloadWriter& w, const std::vector<torch::Tensor>& tensors) {
  w.u32(static_cast<std::uint32_t>(tensors.size()));
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor flat = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
    w.u64(static_cast<std::uint64_t>(flat.numel()));
    w.str(std::string_view(static_cast<const char*>(flat.data_ptr()),
                           static_cast<std::size_t>(flat.numel()) * sizeof(float)));
  }
}

std::vector<torch::Tensor> read_tensors(net::PayloadReader& r,
                                        const std::vector<std::int64_t>& numels,
                                        const std::string& what) {
  auto bad = [&](const std::string& why) {
    return net::ProtocolError(net::ProtocolErrorKind::kMalformedPayload, what + ": " + why);
  };
  const std::uint32_t n = r.u32();
  if (n != numels.size()) {
    throw bad(std::to_string(n) + " tensors, expected " + std::to_string(numels.size()));
  }
  std::vector<torch::Tensor> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t count = r.u64();
    if (count != static_cast<std::uint64_t>(numels[i])) {
      throw bad("tensor " + std::to_string(i) + " has " + std::to_string(count) +
                " elements, expected " + std::to_string(numels[i]));
    }
    const net::Bytes data = r.bytes();
    if (data.size() != count * sizeof(float)) {
      throw bad("tensor " + std::to_string(i) + " carries " + std::to_string(data.size()) +
                " bytes for " + std::to_string(count) + " float32 elements");
    }
    torch::Tensor t = torch::empty({static_cast<std::int64_t>(count)}, torch::kFloat);
    if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace ddl::ps::protocol
