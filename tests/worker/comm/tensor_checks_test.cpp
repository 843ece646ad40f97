// The tensor checks and dtype mapping the Gloo and NCCL communicators share, without a GPU.
#include "tests/worker/comm/rank_checks.h"
#include "worker/comm/tensor_checks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

namespace ddl {
namespace {

using testing::error_of;

TEST(TensorChecks, GlooAcceptsContiguousCpuTensorsOfItsDtypes) {
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}) {
    EXPECT_NO_THROW(check_tensor("w: ", torch::zeros({2, 3}, dtype), gloo_tensor_rules()))
        << c10::toString(dtype);
  }
  EXPECT_EQ(mesh_dtype("w: ", torch::kFloat), DType::kFloat32);
  EXPECT_EQ(mesh_dtype("w: ", torch::kDouble), DType::kFloat64);
  EXPECT_EQ(mesh_dtype("w: ", torch::kInt), DType::kInt32);
  EXPECT_EQ(mesh_dtype("w: ", torch::kLong), DType::kInt64);
  EXPECT_EQ(error_of([] { mesh_dtype("w: ", torch::kHalf); }),
            "w: unsupported dtype float16 (expected float32, float64, int32 or int64)");
}

TEST(TensorChecks, SaysWhatIsWrong) {
  const auto gloo = gloo_tensor_rules();
  EXPECT_EQ(error_of([&] { check_tensor("gloo x: ", torch::Tensor(), gloo); }),
            "gloo x: tensor is undefined");
  EXPECT_EQ(error_of([&] {
              check_tensor("gloo x: ", torch::zeros({4, 4}).t(), gloo);
            }),
            "gloo x: tensor is not contiguous");
  EXPECT_EQ(error_of([&] { check_tensor("gloo x: ", torch::zeros({4}, torch::kUInt8), gloo); }),
            "gloo x: unsupported dtype uint8 (expected float32, float64, int32 or int64)");
  EXPECT_EQ(error_of([&] { check_tensor("gloo x: ", torch::zeros({4}, torch::kHalf), gloo); }),
            "gloo x: unsupported dtype float16 (expected float32, float64, int32 or int64)");
  // NCCL's rules: a CPU tensor is on the wrong device; float16 is among its dtypes.
  const auto nccl = nccl_tensor_rules(1);
  EXPECT_EQ(error_of([&] { check_tensor("nccl x: ", torch::zeros({4}), nccl); }),
            "nccl x: needs a tensor on cuda:1, got one on cpu");
  ASSERT_EQ(nccl.dtypes.size(), 5u);
  EXPECT_EQ(nccl.dtypes.back(), torch::kHalf);
}

TEST(TensorChecks, PeersAndRoots) {
  EXPECT_NO_THROW(check_peer("p: ", 1, 0, 2));
  EXPECT_EQ(error_of([] { check_peer("p: ", 0, 0, 2); }), "p: the peer is this rank itself");
  EXPECT_EQ(error_of([] { check_peer("p: ", 2, 0, 2); }), "p: not a rank (expected 0..1)");
  EXPECT_EQ(error_of([] { check_peer("p: ", -1, 0, 2); }), "p: not a rank (expected 0..1)");
  EXPECT_NO_THROW(check_root("r: ", 0, 1));
  EXPECT_EQ(error_of([] { check_root("r: ", 1, 1); }), "r: root 1 is not a rank (world size 1)");
}

}  // namespace
}  // namespace ddl
