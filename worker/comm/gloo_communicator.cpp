// Gloo communicator: checks each tensor (CPU, contiguous, a supported dtype) and runs the
// collective on its bytes through GlooMesh.
#include "worker/comm/gloo_communicator.h"

#include <sstream>
#include <utility>

namespace ddl {
namespace {

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::unique_ptr<GlooMesh> mesh) : mesh_(std::move(mesh)) {}

  int rank() const override { return mesh_->rank(); }
  int size() const override { return mesh_->size(); }
  std::string backend() const override { return "gloo"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    const DType dtype = check_tensor("all_reduce", tensor);
    mesh_->all_reduce_sum(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), dtype);
    if (op == ReduceOp::kAverage && size() > 1) {
      // Integer averages truncate toward zero, like C++ integer division.
      if (tensor.is_floating_point()) {
        tensor.div_(size());
      } else {
        tensor.div_(size(), "trunc");
      }
    }
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    check_tensor("broadcast", tensor);
    mesh_->broadcast(tensor.data_ptr(), tensor.nbytes(), root);
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    check_tensor("all_gather", tensor);
    std::vector<int64_t> shape{size()};
    for (auto d : tensor.sizes()) shape.push_back(d);
    torch::Tensor out = torch::empty(shape, tensor.options());
    mesh_->all_gather(tensor.data_ptr(), tensor.nbytes(), out.data_ptr());
    return out.unbind(0);
  }

  void barrier() override { mesh_->barrier(); }

 private:
  std::string where(const char* op) const {
    std::ostringstream s;
    s << "gloo " << op << " on rank " << rank() << " of " << size() << ": ";
    return s.str();
  }

  DType check_tensor(const char* op, const torch::Tensor& tensor) const {
    if (!tensor.defined()) throw CommError(where(op) + "tensor is undefined");
    if (!tensor.device().is_cpu()) {
      throw CommError(where(op) + "needs a CPU tensor, got one on " + tensor.device().str());
    }
    if (!tensor.is_contiguous()) throw CommError(where(op) + "tensor is not contiguous");
    switch (tensor.scalar_type()) {
      case torch::kFloat:
        return DType::kFloat32;
      case torch::kDouble:
        return DType::kFloat64;
      case torch::kInt:
        return DType::kInt32;
      case torch::kLong:
        return DType::kInt64;
      default:
        throw CommError(where(op) + "unsupported dtype " +
                        std::string(c10::toString(tensor.scalar_type())) +
                        " (expected float32, float64, int32 or int64)");
    }
  }

  std::unique_ptr<GlooMesh> mesh_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options) {
  return std::make_unique<GlooCommunicator>(GlooMesh::connect(store, options));
}

}  // namespace ddl
