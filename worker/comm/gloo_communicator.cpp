// Gloo communicator: checks each tensor (worker/comm/tensor_checks.h) and runs the call on its
// bytes through GlooMesh.
#include "worker/comm/gloo_communicator.h"

#include <sstream>
#include <utility>

#include "worker/comm/tensor_checks.h"

namespace ddl {
namespace {

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::unique_ptr<GlooMesh> mesh) : mesh_(std::move(mesh)) {}

  int rank() const override { return mesh_->rank(); }
  int size() const override { return mesh_->size(); }
  std::string backend() const override { return "gloo"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    const DType dtype = checked("all_reduce", tensor);
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
    checked("broadcast", tensor);
    mesh_->broadcast(tensor.data_ptr(), tensor.nbytes(), root);
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override {
    checked("all_gather", tensor);
    std::vector<int64_t> shape{size()};
    for (auto d : tensor.sizes()) shape.push_back(d);
    torch::Tensor out = torch::empty(shape, tensor.options());
    mesh_->all_gather(tensor.data_ptr(), tensor.nbytes(), out.data_ptr());
    return out.unbind(0);
  }

  void barrier() override { mesh_->barrier(); }

  // The mesh checks the peer before anything moves, naming it in the same words.
  void send(const torch::Tensor& tensor, int dst) override {
    const DType dtype = checked("send", tensor, "to", dst);
    mesh_->send(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), dtype, dst);
  }

  void recv(torch::Tensor& tensor, int src) override {
    const DType dtype = checked("recv", tensor, "from", src);
    mesh_->recv(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), dtype, src);
  }

 private:
  std::string where(const char* op, const char* direction = nullptr, int peer = 0) const {
    std::ostringstream s;
    s << "gloo " << op << " on rank " << rank() << " of " << size();
    if (direction != nullptr) s << " (" << direction << " rank " << peer << ")";
    s << ": ";
    return s.str();
  }

  DType checked(const char* op, const torch::Tensor& tensor, const char* direction = nullptr,
                int peer = 0) const {
    const std::string at = where(op, direction, peer);
    check_tensor(at, tensor, gloo_tensor_rules());
    return mesh_dtype(at, tensor.scalar_type());
  }

  std::unique_ptr<GlooMesh> mesh_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options) {
  return std::make_unique<GlooCommunicator>(GlooMesh::connect(store, options));
}

std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options,
                                                     const RankGroup& group) {
  return std::make_unique<GlooCommunicator>(GlooMesh::connect_group(store, options, group));
}

}  // namespace ddl
