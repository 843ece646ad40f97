// Tensor checks shared by the communicators.
#include "worker/comm/tensor_checks.h"

#include <algorithm>

namespace ddl {
namespace {

// "a, b or c"
std::string one_of(const std::vector<torch::ScalarType>& dtypes) {
  std::string text;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) text += i + 1 == dtypes.size() ? " or " : ", ";
    text += dtype_name(dtypes[i]);
  }
  return text;
}

}  // namespace

TensorRules gloo_tensor_rules() {
  return {torch::Device(torch::kCPU), {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}};
}

TensorRules nccl_tensor_rules(int device) {
  return {torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device)),
          {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kHalf}};
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat:
      return "float32";
    case torch::kDouble:
      return "float64";
    case torch::kInt:
      return "int32";
    case torch::kLong:
      return "int64";
    case torch::kHalf:
      return "float16";
    case torch::kByte:
      return "uint8";
    default:
      return c10::toString(dtype);
  }
}

void check_tensor(const std::string& where, const torch::Tensor& tensor, const TensorRules& rules) {
  if (!tensor.defined()) throw CommError(where + "tensor is undefined");
  if (tensor.device() != rules.device) {
    throw CommError(where + "needs a tensor on " + rules.device.str() + ", got one on " +
                    tensor.device().str());
  }
  if (!tensor.is_contiguous()) throw CommError(where + "tensor is not contiguous");
  const auto dtype = tensor.scalar_type();
  if (std::find(rules.dtypes.begin(), rules.dtypes.end(), dtype) == rules.dtypes.end()) {
    throw CommError(where + "unsupported dtype " + dtype_name(dtype) + " (expected " +
                    one_of(rules.dtypes) + ")");
  }
}

void check_peer(const std::string& where, int peer, int rank, int size) {
  if (peer == rank) throw CommError(where + "the peer is this rank itself");
  if (peer < 0 || peer >= size) {
    throw CommError(where + "not a rank (expected 0.." + std::to_string(size - 1) + ")");
  }
}

void check_root(const std::string& where, int root, int size) {
  if (root < 0 || root >= size) {
    throw CommError(where + "root " + std::to_string(root) + " is not a rank (world size " +
                    std::to_string(size) + ")");
  }
}

DType mesh_dtype(const std::string& where, torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat:
      return DType::kFloat32;
    case torch::kDouble:
      return DType::kFloat64;
    case torch::kInt:
      return DType::kInt32;
    case torch::kLong:
      return DType::kInt64;
    default:
      throw CommError(where + "unsupported dtype " + dtype_name(dtype) + " (expected " +
                      one_of(gloo_tensor_rules().dtypes) + ")");
  }
}

}  // namespace ddl
