// The checks every communicator makes before moving a tensor, and the mapping of LibTorch dtypes
// to the element types the backends move, in one place for Gloo and NCCL. Internal to ddl_comm
// (not installed).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "worker/comm/comm_error.h"
#include "worker/comm/gloo_mesh.h"

namespace ddl {

// What one backend accepts.
struct TensorRules {
  torch::Device device;                   // where its tensors must live
  std::vector<torch::ScalarType> dtypes;  // the element types it moves
};

// CPU tensors of float32, float64, int32 or int64.
TensorRules gloo_tensor_rules();
// Tensors on cuda:`device` of float32, float64, int32, int64 or float16.
TensorRules nccl_tensor_rules(int device);

// "float32", "int64", ... (LibTorch's own names for the others).
std::string dtype_name(torch::ScalarType dtype);

// Returns normally when `tensor` is defined, on `rules.device`, contiguous and of one of
// `rules.dtypes`; otherwise throws CommError whose message is `where` followed by what is wrong
// (e.g. "unsupported dtype uint8 (expected float32, float64, int32 or int64)").
void check_tensor(const std::string& where, const torch::Tensor& tensor, const TensorRules& rules);

// Returns normally when `peer` is a rank of a communicator of `size` ranks other than `rank`
// itself; otherwise throws CommError starting with `where`.
void check_peer(const std::string& where, int peer, int rank, int size);

// Returns normally when `root` is within [0, size); otherwise throws CommError starting with
// `where`.
void check_root(const std::string& where, int root, int size);

// The Gloo mesh's element type for `dtype`. Throws CommError starting with `where` for a dtype
// outside gloo_tensor_rules().
DType mesh_dtype(const std::string& where, torch::ScalarType dtype);

}  // namespace ddl
