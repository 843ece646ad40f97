// ParameterServer: the shard, its optimizer and the trainers' requests, all on the framed server's
// one thread (net/server.h), so nothing here needs a lock except the outcome handed to run().
#include "worker/ps/parameter_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <future>
#include <map>
#include <numeric>
#include <optional>

#include "env/text.h"
#include "net/server.h"
#include "worker/ps/protocol.h"

namespace ddl::ps {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using net::Connection;
using net::Frame;
using net::PayloadReader;
using net::PayloadWriter;
using protocol::byte;
using protocol::Op;

constexpr const char* kStateFormat = "ddl-ps-shard-v1";
// How long a finished (or failed) server waits for its trainers to read the last answers and
// close their connections before run() returns.
constexpr milliseconds kLinger{10'000};
constexpr milliseconds kFailLinger{2'000};

// "10.0 s": one decimal and the unit, as the server's messages give a duration (unlike
// env::seconds_text, which writes a flag's value).
std::string one_decimal_seconds(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// A request answered later: a sync push (when the step's last gradient arrives) or a finish (when
// the last trainer finishes).
struct Waiting {
  std::weak_ptr<Connection> connection;
  std::uint32_t request_id = 0;
};

struct Trainer {
  const Connection* connection = nullptr;  // its registered connection
  std::string peer;
  bool finished = false;   // sent finish
  bool answered = false;   // its finish was answered: it may close now
  bool closed = false;
  std::optional<Waiting> waiting;
  Clock::time_point last_seen;
  std::uint64_t pulled_version = 0;             // the version its parameters are at
  std::optional<std::vector<torch::Tensor>> pushed;  // sync: this step's gradients
};

// What the constructor prepares and the service works on. Owned by ParameterServer::Impl.
struct Shard {
  ServerConfig config;
  std::string name;  // "server 1"
  std::vector<torch::Tensor> params;  // flat float32 CPU leaves
  std::vector<std::int64_t> numels;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::uint64_t version = 0;
  std::map<int, std::string> positions;  // trainer id -> its saved position
  ServerReport report;
  double staleness_sum = 0.0;
  std::uint64_t staleness_count = 0;
};

std::string sizes_text(const std::vector<std::int64_t>& sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i ? "," : "") + std::to_string(sizes[i]);
  return out + "]";
}

// The fields a saved state must share with the server that loads it, as text, in one order.
std::vector<std::pair<std::string, std::string>> shard_shape(const Shard& s) {
  return {{"format", kStateFormat},
          {"index", std::to_string(s.config.index)},
          {"servers", std::to_string(s.config.servers)},
          {"trainers", std::to_string(s.config.trainers)},
          {"mode", mode_name(s.config.mode)},
          {"sizes", sizes_text(s.numels)}};
}

void write_state(const Shard& s, torch::serialize::OutputArchive& archive) {
  for (const auto& [key, value] : shard_shape(s)) archive.write(key, c10::IValue(value));
  archive.write("version", c10::IValue(static_cast<std::int64_t>(s.version)));
  for (const auto& [id, text] : s.positions) {
    archive.write("position." + std::to_string(id), c10::IValue(text));
  }
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    archive.write("param." + std::to_string(i), s.params[i]);
  }
  torch::serialize::OutputArchive optimizer;
  s.optimizer->save(optimizer);
  archive.write("optimizer", optimizer);
}

void read_state(Shard& s, torch::serialize::InputArchive& archive) {
  for (const auto& [key, mine] : shard_shape(s)) {
    c10::IValue v;
    const bool found = archive.try_read(key, v) && v.isString();
    if (!found || v.toStringRef() != mine) {
      throw PsError(s.name + ": the saved state is not this server's shard: its " + key +
                    " is " + (found ? "'" + v.toStringRef() + "'" : std::string("missing")) +
                    ", this server's is '" + mine + "'");
    }
  }
  c10::IValue version;
  if (!archive.try_read("version", version) || !version.isInt()) {
    throw PsError(s.name + ": the saved state has no version");
  }
  s.version = static_cast<std::uint64_t>(version.toInt());
  s.positions.clear();
  for (int t = 0; t < s.config.trainers; ++t) {
    c10::IValue position;
    if (archive.try_read("position." + std::to_string(t), position) && position.isString()) {
      s.positions[t] = position.toStringRef();
    }
  }
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    torch::Tensor saved;
    archive.read("param." + std::to_string(i), saved);
    s.params[i].copy_(saved.reshape({-1}).to(torch::kFloat));
  }
  torch::serialize::InputArchive optimizer;
  archive.read("optimizer", optimizer);
  s.optimizer->load(optimizer);
}

class PsService : public net::ServiceHandler {
 public:
  using Outcome = std::optional<std::string>;  // the failure, or nothing when done

  PsService(asio::io_context& io, Shard& shard, std::promise<Outcome>& outcome)
      : io_(io), s_(shard), outcome_(outcome), trainers_(shard.config.trainers),
        tick_(io), linger_(io) {
    started_ = Clock::now();
    schedule_tick();
  }

  void on_request(const std::shared_ptr<Connection>& c, Frame&& f) override;
  void on_close(Connection& c) override;
  void on_stop() override {
    tick_.cancel();
    linger_.cancel();
    resolve(failure_);
  }

 private:
  const ServerConfig& cfg() const { return s_.config; }
  std::string trainer_name(int t) const {
    const Trainer& tr = trainers_[static_cast<std::size_t>(t)];
    return "trainer " + std::to_string(t) + (tr.peer.empty() ? "" : " (" + tr.peer + ")");
  }

  void handle_register(const std::shared_ptr<Connection>& c, int t, PayloadReader& r,
                       std::uint32_t id);
  void handle_push(const std::shared_ptr<Connection>& c, int t, PayloadReader& r,
                   std::uint32_t id);
  void handle_save(const std::shared_ptr<Connection>& c, int t, PayloadReader& r,
                   std::uint32_t id);
  void handle_finish(const std::shared_ptr<Connection>& c, int t, std::uint32_t id);

  net::Bytes params_payload(std::uint64_t staleness) const {
    PayloadWriter w;
    w.u64(s_.version).u64(staleness);
    protocol::write_tensors(w, s_.params);
    return w.take();
  }
  void answer_params(const Waiting& w, int t, std::uint64_t staleness) {
    if (auto c = w.connection.lock()) c->reply(w.request_id, byte(Op::kParams), params_payload(staleness));
    trainers_[static_cast<std::size_t>(t)].pulled_version = s_.version;
  }
  static void answer_error(const Waiting& w, const std::string& message) {
    if (auto c = w.connection.lock()) {
      c->reply(w.request_id, static_cast<std::uint8_t>(net::TransportOp::kError),
               PayloadWriter().str(message).take());
    }
  }

  void apply(const std::vector<torch::Tensor>& grads);
  void complete_round();
  void fail(const std::string& reason);
  void finish_when_closed();
  void schedule_tick();
  void tick();
  void resolve(const Outcome& outcome) {
    if (resolved_) return;
    resolved_ = true;
    outcome_.set_value(outcome);
  }

  asio::io_context& io_;
  Shard& s_;
  std::promise<Outcome>& outcome_;
  std::vector<Trainer> trainers_;
  asio::steady_timer tick_;
  asio::steady_timer linger_;
  Clock::time_point started_;
  bool all_joined_ = false;
  int round_count_ = 0;  // sync: gradients of the current step received so far
  Clock::time_point round_started_;
  std::optional<Clock::time_point> first_finish_;
  bool finished_ = false;  // every trainer finished and was answered
  std::optional<std::string> failure_;
  bool resolved_ = false;
};

void PsService::on_request(const std::shared_ptr<Connection>& c, Frame&& f) {
  const int t = c->rank();
  const std::string what = protocol::op_name(f.op) + " from trainer " + std::to_string(t);
  if (t < 0 || t >= cfg().trainers) {
    c->drop("rank " + std::to_string(t) + " is not a trainer of this job (it has " +
            std::to_string(cfg().trainers) + ")");
    return;
  }
  if (failure_) {
    answer_error(Waiting{c, f.request_id}, *failure_);
    return;
  }
  Trainer& tr = trainers_[static_cast<std::size_t>(t)];
  const auto op = static_cast<Op>(f.op);
  if (op != Op::kRegister && tr.connection != c.get()) {
    c->drop(what + " on a connection that did not register as that trainer");
    return;
  }
  if (tr.waiting) {
    c->drop("sent a " + protocol::op_name(f.op) + " while its previous request was waiting");
    return;
  }
  if (tr.finished && op != Op::kRegister) {
    c->drop("sent a " + protocol::op_name(f.op) + " after it finished");
    return;
  }
  tr.last_seen = Clock::now();
  PayloadReader r(f.payload, what);
  switch (op) {
    case Op::kRegister:
      handle_register(c, t, r, f.request_id);
      return;
    case Op::kPull:
      r.finish();
      answer_params(Waiting{c, f.request_id}, t, 0);
      return;
    case Op::kPush:
      handle_push(c, t, r, f.request_id);
      return;
    case Op::kSave:
      handle_save(c, t, r, f.request_id);
      return;
    case Op::kFinish:
      r.finish();
      handle_finish(c, t, f.request_id);
      return;
    default:
      throw net::ProtocolError(net::ProtocolErrorKind::kUnknownOp,
                               "unknown parameter-server op " + std::to_string(f.op));
  }
}

void PsService::handle_register(const std::shared_ptr<Connection>& c, int t, PayloadReader& r,
                                std::uint32_t id) {
  const auto mode = r.u8();
  const auto trainers = static_cast<int>(r.u32());
  const auto servers = static_cast<int>(r.u32());
  const auto index = static_cast<int>(r.u32());
  const std::uint32_t n = r.u32();
  std::vector<std::int64_t> numels;
  for (std::uint32_t i = 0; i < n; ++i) numels.push_back(static_cast<std::int64_t>(r.u64()));
  r.finish();
  Trainer& tr = trainers_[static_cast<std::size_t>(t)];
  std::string mismatch;
  auto differs = [&](const std::string& field, const std::string& theirs,
                     const std::string& ours) {
    if (mismatch.empty() && theirs != ours) {
      mismatch = field + " " + theirs + " where this server has " + ours;
    }
  };
  differs("mode", mode_name(static_cast<UpdateMode>(mode)), mode_name(cfg().mode));
  differs("trainer count", std::to_string(trainers), std::to_string(cfg().trainers));
  differs("server count", std::to_string(servers), std::to_string(cfg().servers));
  differs("server index", std::to_string(index), std::to_string(cfg().index));
  differs("shard tensor sizes", sizes_text(numels), sizes_text(s_.numels));
  if (tr.connection != nullptr) {
    mismatch = "a second registration as trainer " + std::to_string(t) + " (from " + c->peer() +
               "; the first came from " + tr.peer + ")";
  }
  if (!mismatch.empty()) {
    const std::string reason = "trainer " + std::to_string(t) + " (" + c->peer() +
                               ") registered with " + mismatch +
                               ": the trainers and servers must run the same program and options";
    fail(reason);
    answer_error(Waiting{c, id}, failure_.value_or(s_.name + ": " + reason));
    return;
  }
  tr.connection = c.get();
  tr.peer = c->peer();
  tr.pulled_version = s_.version;
  const auto saved = s_.positions.find(t);
  c->reply(id, byte(Op::kRegistered),
           PayloadWriter()
               .u64(s_.version)
               .str(saved == s_.positions.end() ? std::string() : saved->second)
               .take());
  all_joined_ = std::all_of(trainers_.begin(), trainers_.end(),
                            [](const Trainer& x) { return x.connection != nullptr; });
  if (all_joined_) {
    spdlog::info("{}: all {} trainer(s) registered; {} tensors, {} elements, version {}", s_.name,
                 cfg().trainers, s_.params.size(),
                 std::accumulate(s_.numels.begin(), s_.numels.end(), std::int64_t{0}), s_.version);
  }
}

void PsService::handle_push(const std::shared_ptr<Connection>& c, int t, PayloadReader& r,
                            std::uint32_t id) {
  std::vector<torch::Tensor> grads =
      protocol::read_tensors(r, s_.numels, "push from trainer " + std::to_string(t));
  r.finish();
  Trainer& tr = trainers_[static_cast<std::size_t>(t)];
  ++s_.report.pushes;
  if (cfg().mode == UpdateMode::kAsync) {
    const std::uint64_t staleness = s_.version - tr.pulled_version;
    s_.staleness_sum += static_cast<double>(staleness);
    ++s_.staleness_count;
    s_.report.staleness_max = std::max(s_.report.staleness_max, staleness);
    apply(grads);
    answer_params(Waiting{c, id}, t, staleness);
    return;
  }
  for (int u = 0; u < cfg().trainers; ++u) {
    if (trainers_[static_cast<std::size_t>(u)].finished) {
      const std::string reason =
          "trainer " + std::to_string(t) + " pushed the gradients of step " +
          std::to_string(s_.version + 1) + " but trainer " + std::to_string(u) +
          " has already finished: in sync mode every trainer must run the same number of steps";
      fail(reason);
      answer_error(Waiting{c, id}, failure_.value_or(s_.name + ": " + reason));
      return;
    }
  }
  tr.pushed = std::move(grads);
  tr.waiting = Waiting{c, id};
  if (round_count_++ == 0) round_started_ = Clock::now();
  if (round_count_ == cfg().trainers) complete_round();
}

void PsService::complete_round() {
  std::vector<torch::Tensor> mean;
  mean.reserve(s_.params.size());
  for (std::size_t i = 0; i < s_.params.size(); ++i) {
    torch::Tensor sum = (*trainers_[0].pushed)[i].clone();
    for (std::size_t u = 1; u < trainers_.size(); ++u) sum.add_((*trainers_[u].pushed)[i]);
    mean.push_back(sum.div_(static_cast<double>(cfg().trainers)));
  }
  apply(mean);
  round_count_ = 0;
  for (std::size_t u = 0; u < trainers_.size(); ++u) {
    Trainer& tr = trainers_[u];
    tr.pushed.reset();
    const Waiting w = *tr.waiting;
    tr.waiting.reset();
    tr.last_seen = Clock::now();
    answer_params(w, static_cast<int>(u), 0);
  }
}

void PsService::apply(const std::vector<torch::Tensor>& grads) {
  for (std::size_t i = 0; i < s_.params.size(); ++i) s_.params[i].mutable_grad() = grads[i];
  s_.optimizer->step();
  ++s_.version;
}

void PsService::handle_save(const std::shared_ptr<Connection>& c, int t, PayloadReader& r,
                            std::uint32_t id) {
  const std::string position = r.str();
  r.finish();
  if (!cfg().save) {
    answer_error(Waiting{c, id}, s_.name + " was started without a place to save its shard");
    return;
  }
  // In sync mode every trainer is at the saving trainer's position; in async mode each trainer
  // saves its own.
  if (cfg().mode == UpdateMode::kSync) {
    for (int u = 0; u < cfg().trainers; ++u) s_.positions[u] = position;
  } else {
    s_.positions[t] = position;
  }
  try {
    torch::serialize::OutputArchive archive;
    write_state(s_, archive);
    cfg().save(archive);
  } catch (const std::exception& e) {
    answer_error(Waiting{c, id}, s_.name + ": saving the shard failed: " + e.what());
    return;
  }
  c->reply(id, byte(Op::kSaved), PayloadWriter().u64(s_.version).take());
}

void PsService::handle_finish(const std::shared_ptr<Connection>& c, int t, std::uint32_t id) {
  if (cfg().mode == UpdateMode::kSync && round_count_ > 0) {
    std::vector<int> waiting;
    for (int u = 0; u < cfg().trainers; ++u) {
      if (trainers_[static_cast<std::size_t>(u)].pushed) waiting.push_back(u);
    }
    const std::string reason = "trainer " + std::to_string(t) + " finished while trainer(s) " +
                               env::join(waiting, ", ") + " wait for the gradients of step " +
                               std::to_string(s_.version + 1) +
                               ": in sync mode every trainer must run the same number of steps";
    fail(reason);
    answer_error(Waiting{c, id}, failure_.value_or(s_.name + ": " + reason));
    return;
  }
  Trainer& tr = trainers_[static_cast<std::size_t>(t)];
  tr.finished = true;
  tr.waiting = Waiting{c, id};
  if (!first_finish_) first_finish_ = Clock::now();
  const bool all = std::all_of(trainers_.begin(), trainers_.end(),
                               [](const Trainer& x) { return x.finished; });
  if (!all) return;
  for (std::size_t u = 0; u < trainers_.size(); ++u) {
    Trainer& x = trainers_[u];
    const Waiting w = *x.waiting;
    x.waiting.reset();
    x.answered = true;
    answer_params(w, static_cast<int>(u), 0);
  }
  finished_ = true;
  s_.report.updates = s_.version;
  s_.report.staleness_mean =
      s_.staleness_count == 0 ? 0.0 : s_.staleness_sum / static_cast<double>(s_.staleness_count);
  spdlog::info("{}: every trainer finished after {} update(s); waiting for them to disconnect",
               s_.name, s_.version);
  linger_.expires_after(kLinger);
  linger_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    spdlog::warn("{}: trainer connections still open {} after every trainer finished; stopping",
                 s_.name, one_decimal_seconds(kLinger));
    resolve(std::nullopt);
  });
  finish_when_closed();
}

void PsService::finish_when_closed() {
  // Done (or failed) once every trainer that connected has gone: nobody is left to answer.
  const bool all_gone = std::all_of(trainers_.begin(), trainers_.end(), [](const Trainer& x) {
    return x.closed || x.connection == nullptr;
  });
  if (all_gone && (finished_ || failure_)) resolve(failure_);
}

void PsService::on_close(Connection& c) {
  for (std::size_t u = 0; u < trainers_.size(); ++u) {
    Trainer& tr = trainers_[u];
    if (tr.connection != &c) continue;
    tr.closed = true;
    tr.waiting.reset();
    if (!tr.answered && !failure_) {
      fail(trainer_name(static_cast<int>(u)) +
           " closed its connection before it finished (the process exited or died)");
    }
    finish_when_closed();
    return;
  }
}

void PsService::fail(const std::string& reason) {
  if (failure_ || finished_) return;
  failure_ = s_.name + ": " + reason;
  spdlog::error("{}", *failure_);
  for (Trainer& tr : trainers_) {
    if (tr.waiting) answer_error(*tr.waiting, *failure_);
    tr.waiting.reset();
  }
  // Give the answers a moment to reach the trainers before run() returns and the server closes.
  linger_.expires_after(kFailLinger);
  linger_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) resolve(failure_);
  });
  finish_when_closed();
}

void PsService::schedule_tick() {
  const milliseconds period = std::clamp(cfg().deadlines.step / 10, milliseconds(10),
                                         milliseconds(500));
  tick_.expires_after(period);
  tick_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    tick();
    if (!failure_ && !finished_) schedule_tick();
  });
}

void PsService::tick() {
  const auto now = Clock::now();
  const Deadlines& d = cfg().deadlines;
  if (!all_joined_ && now - started_ > d.join) {
    std::vector<int> missing;
    for (int u = 0; u < cfg().trainers; ++u) {
      if (!trainers_[static_cast<std::size_t>(u)].connection) missing.push_back(u);
    }
    fail("trainer(s) " + env::join(missing, ", ") + " did not register within " +
         one_decimal_seconds(d.join));
    return;
  }
  if (round_count_ > 0 && now - round_started_ > d.step) {
    std::vector<int> missing;
    std::vector<int> waiting;
    for (int u = 0; u < cfg().trainers; ++u) {
      (trainers_[static_cast<std::size_t>(u)].pushed ? waiting : missing).push_back(u);
    }
    fail("step " + std::to_string(s_.version + 1) + ": no gradients from trainer(s) " +
         env::join(missing, ", ") + " within " + one_decimal_seconds(d.step) +
         " while trainer(s) " + env::join(waiting, ", ") + " wait (a stalled or stopped trainer?)");
    return;
  }
  for (int u = 0; u < cfg().trainers; ++u) {
    const Trainer& tr = trainers_[static_cast<std::size_t>(u)];
    if (tr.connection && !tr.finished && !tr.waiting && now - tr.last_seen > d.step) {
      fail(trainer_name(u) + " has sent nothing for " + one_decimal_seconds(d.step) +
           " (stalled or stopped?)");
      return;
    }
  }
  if (first_finish_ && now - *first_finish_ > d.finish) {
    std::vector<int> running;
    for (int u = 0; u < cfg().trainers; ++u) {
      if (!trainers_[static_cast<std::size_t>(u)].finished) running.push_back(u);
    }
    fail("trainer(s) " + env::join(running, ", ") + " did not finish within " +
         one_decimal_seconds(d.finish) + " of the first trainer that did");
  }
}

}  // namespace

std::string mode_name(UpdateMode mode) { return mode == UpdateMode::kAsync ? "async" : "sync"; }

UpdateMode parse_mode(std::string_view text) {
  if (text == "sync") return UpdateMode::kSync;
  if (text == "async") return UpdateMode::kAsync;
  throw std::invalid_argument("unknown parameter-server mode '" + std::string(text) +
                              "', expected sync or async");
}

class ParameterServer::Impl {
 public:
  Impl(const ServerConfig& config, const std::vector<torch::Tensor>& shard,
       const OptimizerFactory& make_optimizer) {
    s_.config = config;
    s_.name = "server " + std::to_string(config.index);
    if (config.trainers < 1) throw PsError(s_.name + ": a job needs at least one trainer");
    for (const torch::Tensor& t : shard) {
      torch::Tensor p = t.detach().to(torch::kCPU, torch::kFloat).reshape({-1}).clone();
      p.set_requires_grad(true);
      s_.numels.push_back(p.numel());
      s_.params.push_back(std::move(p));
    }
    s_.optimizer = make_optimizer(s_.params);
    if (config.load) {
      torch::serialize::InputArchive archive;
      if (config.load(archive)) {
        read_state(s_, archive);
        s_.report.resumed = true;
        s_.report.resumed_version = s_.version;
        spdlog::info("{}: resumed its shard at version {}", s_.name, s_.version);
      }
    }
    net::ServerOptions options;
    options.endpoint = config.endpoint;
    options.job_id = config.job_id;
    options.secret = config.secret;
    options.service = net::Service::kParameterServer;
    options.name = "parameter " + s_.name;
    options.rank = config.index;
    try {
      server_ = std::make_unique<net::FramedServer>(options, [this](asio::io_context& io) {
        return std::make_unique<PsService>(io, s_, outcome_);
      });
    } catch (const net::NetError& e) {
      throw PsError(s_.name + ": " + e.what());
    }
  }

  ServerReport run() {
    const PsService::Outcome outcome = outcome_.get_future().get();
    if (outcome) throw PsError(*outcome);
    return s_.report;
  }

  Shard s_;
  std::promise<PsService::Outcome> outcome_;
  std::unique_ptr<net::FramedServer> server_;  // last: stopped before the shard goes
};

ParameterServer::ParameterServer(const ServerConfig& config,
                                 const std::vector<torch::Tensor>& shard,
                                 const OptimizerFactory& make_optimizer)
    : impl_(std::make_unique<Impl>(config, shard, make_optimizer)) {}
ParameterServer::~ParameterServer() = default;

std::uint16_t ParameterServer::port() const { return impl_->server_->port(); }
ServerReport ParameterServer::run() { return impl_->run(); }
std::size_t ParameterServer::dropped_connections() const {
  return impl_->server_->dropped_connections();
}

std::vector<torch::Tensor> ParameterServer::parameters() const {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : impl_->s_.params) out.push_back(p.detach().clone());
  return out;
}

}  // namespace ddl::ps
