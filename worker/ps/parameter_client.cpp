// ParameterClient: one FramedClient per server; requests to several servers run side by side
// (one std::async per server beyond the first), so a step costs one round trip, not S.
#include "worker/ps/parameter_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <optional>

#include "net/client.h"
#include "worker/ps/protocol.h"
#include "worker/ps/sharding.h"

namespace ddl::ps {
namespace {

using std::chrono::milliseconds;
using net::Frame;
using net::PayloadReader;
using net::PayloadWriter;
using protocol::byte;
using protocol::Op;

// Runs fn(0..n-1), index 0 on the calling thread and the others on their own threads, and
// rethrows the first failure (lowest index) once all are done.
template <class Fn>
void for_each_server(int n, const Fn& fn) {
  if (n == 1) {
    fn(0);
    return;
  }
  std::vector<std::future<void>> others;
  for (int i = 1; i < n; ++i) others.push_back(std::async(std::launch::async, fn, i));
  std::exception_ptr first;
  try {
    fn(0);
  } catch (...) {
    first = std::current_exception();
  }
  for (auto& f : others) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

struct ServerLink {
  std::unique_ptr<net::FramedClient> client;
  std::vector<int> tensors;            // parameter indices this server holds, in order
  std::vector<std::int64_t> numels;
  std::uint64_t version = 0;
  std::string position;
  std::uint64_t staleness = 0;  // of the last push
};

}  // namespace

class ParameterClient::Impl {
 public:
  Impl(const ClientConfig& config, std::vector<torch::Tensor> params)
      : config_(config), params_(std::move(params)) {
    const std::string me = "trainer " + std::to_string(config.trainer_id);
    if (config_.servers.empty()) throw PsError(me + ": the job lists no parameter servers");
    if (config_.trainer_id < 0 || config_.trainer_id >= config_.trainers) {
      throw PsError(me + ": not below the job's " + std::to_string(config_.trainers) +
                    " trainers");
    }
    std::vector<std::int64_t> sizes;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].scalar_type() != torch::kFloat) {
        throw PsError(me + ": parameter " + std::to_string(i) + " is " +
                      std::string(c10::toString(params_[i].scalar_type())) +
                      "; the parameter server carries float32 only");
      }
      sizes.push_back(params_[i].numel());
    }
    const int n = static_cast<int>(config_.servers.size());
    assignment_ = assign_shards(sizes, n);
    links_.resize(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) {
      ServerLink& link = links_[static_cast<std::size_t>(s)];
      link.tensors = shard_of(assignment_, s);
      for (int i : link.tensors) link.numels.push_back(sizes[static_cast<std::size_t>(i)]);
    }
    for_each_server(n, [&](int s) { connect(s); });
    if (config_.mode == UpdateMode::kSync) check_servers_agree();
    pull();
  }

  void connect(int s) {
    ServerLink& link = links_[static_cast<std::size_t>(s)];
    net::ClientOptions o;
    o.endpoint = config_.servers[static_cast<std::size_t>(s)];
    o.job_id = config_.job_id;
    o.secret = config_.secret;
    o.service = net::Service::kParameterServer;
    o.server_name = "parameter server " + std::to_string(s);
    o.server_host_hint = "server " + std::to_string(s);
    o.rank = config_.trainer_id;
    o.world_size = config_.trainers;
    o.connect_timeout = config_.deadlines.join;
    o.io_timeout = config_.deadlines.io;
    try {
      link.client = std::make_unique<net::FramedClient>(o);
    } catch (const net::NetError& e) {
      throw PsError(e.what());
    }
    PayloadWriter w;
    w.u8(static_cast<std::uint8_t>(config_.mode))
        .u32(static_cast<std::uint32_t>(config_.trainers))
        .u32(static_cast<std::uint32_t>(config_.servers.size()))
        .u32(static_cast<std::uint32_t>(s))
        .u32(static_cast<std::uint32_t>(link.numels.size()));
    for (std::int64_t n : link.numels) w.u64(static_cast<std::uint64_t>(n));
    // Registration waits for nothing on the server: the io deadline bounds it.
    const Frame reply = request(s, Op::kRegister, w.take(), milliseconds(0), Op::kRegistered);
    parse(s, reply, "registered", [&](PayloadReader& r) {
      link.version = r.u64();
      link.position = r.str();
    });
  }

  void check_servers_agree() const {
    for (std::size_t s = 1; s < links_.size(); ++s) {
      if (links_[s].version != links_[0].version || links_[s].position != links_[0].position) {
        throw PsError("trainer " + std::to_string(config_.trainer_id) + ": parameter server " +
                      std::to_string(s) + " is at version " + std::to_string(links_[s].version) +
                      " but server 0 at " + std::to_string(links_[0].version) +
                      ": their saved shards are from different steps (remove the stale "
                      "checkpoint files, or restore a matching set)");
      }
    }
  }

  Frame request(int s, Op op, const net::Bytes& payload, milliseconds wait, Op expected) {
    try {
      return links_[static_cast<std::size_t>(s)].client->request(
          byte(op), payload, wait, {byte(expected)}, protocol::op_name(byte(op)));
    } catch (const net::NetError& e) {
      throw PsError(e.what());
    }
  }

  template <class Fn>
  void parse(int s, const Frame& reply, const std::string& what, Fn fn) {
    try {
      PayloadReader r(reply.payload, what + " reply");
      fn(r);
      r.finish();
    } catch (const net::ProtocolError& e) {
      throw PsError(links_[static_cast<std::size_t>(s)].client->context() + ": " + e.what());
    }
  }

  // Copies the tensors of a params reply from server `s` into the model.
  void take_params(int s, const Frame& reply) {
    ServerLink& link = links_[static_cast<std::size_t>(s)];
    parse(s, reply, "params", [&](PayloadReader& r) {
      link.version = r.u64();
      link.staleness = r.u64();
      const std::vector<torch::Tensor> values =
          protocol::read_tensors(r, link.numels, "params from server " + std::to_string(s));
      torch::NoGradGuard no_grad;
      for (std::size_t k = 0; k < link.tensors.size(); ++k) {
        torch::Tensor& p = params_[static_cast<std::size_t>(link.tensors[k])];
        p.copy_(values[k].view(p.sizes()));
      }
    });
  }

  void push_pull() {
    const auto started = std::chrono::steady_clock::now();
    const int n = static_cast<int>(links_.size());
    for_each_server(n, [&](int s) {
      ServerLink& link = links_[static_cast<std::size_t>(s)];
      std::vector<torch::Tensor> grads;
      grads.reserve(link.tensors.size());
      for (int i : link.tensors) {
        const torch::Tensor& p = params_[static_cast<std::size_t>(i)];
        grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
      }
      PayloadWriter w;
      protocol::write_tensors(w, grads);
      // Sync: the server answers once every trainer has pushed, within its step deadline.
      const milliseconds wait =
          config_.mode == UpdateMode::kSync ? config_.deadlines.step : milliseconds(0);
      take_params(s, request(s, Op::kPush, w.take(), wait, Op::kParams));
    });
    std::uint64_t staleness = 0;
    for (const ServerLink& link : links_) staleness = std::max(staleness, link.staleness);
    ++stats_.pushes;
    staleness_sum_ += static_cast<double>(staleness);
    stats_.staleness_max = std::max(stats_.staleness_max, staleness);
    stats_.seconds_in_push_pull +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

  void pull() {
    for_each_server(static_cast<int>(links_.size()), [&](int s) {
      take_params(s, request(s, Op::kPull, {}, milliseconds(0), Op::kParams));
    });
  }

  void save(const std::string& position) {
    for_each_server(static_cast<int>(links_.size()), [&](int s) {
      const Frame reply =
          request(s, Op::kSave, PayloadWriter().str(position).take(), milliseconds(0), Op::kSaved);
      parse(s, reply, "saved", [&](PayloadReader& r) { r.u64(); });
      links_[static_cast<std::size_t>(s)].position = position;
    });
  }

  void finish() {
    for_each_server(static_cast<int>(links_.size()), [&](int s) {
      take_params(s, request(s, Op::kFinish, {}, config_.deadlines.finish, Op::kParams));
    });
  }

  ClientStats stats() const {
    ClientStats out = stats_;
    out.version = links_.empty() ? 0 : links_[0].version;
    out.staleness_mean =
        stats_.pushes == 0 ? 0.0 : staleness_sum_ / static_cast<double>(stats_.pushes);
    return out;
  }

  ClientConfig config_;
  std::vector<torch::Tensor> params_;
  std::vector<int> assignment_;
  std::vector<ServerLink> links_;
  ClientStats stats_;
  double staleness_sum_ = 0.0;
};

ParameterClient::ParameterClient(const ClientConfig& config, std::vector<torch::Tensor> params)
    : impl_(std::make_unique<Impl>(config, std::move(params))) {}
ParameterClient::~ParameterClient() = default;

const std::string& ParameterClient::saved_position() const { return impl_->links_[0].position; }
void ParameterClient::pull() { impl_->pull(); }
void ParameterClient::push_pull() { impl_->push_pull(); }
void ParameterClient::save(const std::string& position) { impl_->save(position); }
void ParameterClient::finish() { impl_->finish(); }
ClientStats ParameterClient::stats() const { return impl_->stats(); }
int ParameterClient::servers() const { return static_cast<int>(impl_->links_.size()); }
const std::vector<int>& ParameterClient::assignment() const { return impl_->assignment_; }

}  // namespace ddl::ps
