// The parameter server in one process: servers and trainers on threads over real TCP on loopback.
// Sharding; sync mode equals data parallel (the mean gradient through the same optimizer) on a
// small fixture; async progress and staleness; saving and resuming a shard; and every way a job
// can break: a trainer that dies or stalls, a server that dies, bad frames, a mismatched model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <future>
#include <numeric>
#include <sstream>
#include <thread>

#include "net/client.h"
#include "tests/support/poll.h"
#include "worker/ps/parameter_client.h"
#include "worker/ps/parameter_server.h"
#include "worker/ps/protocol.h"
#include "worker/ps/sharding.h"

namespace ddl::ps {
namespace {

using std::chrono::milliseconds;

constexpr const char* kJob = "ps-test-job";
constexpr const char* kSecret = "ps-test-secret";

// A small net with tensors of different sizes (so sharding has something to balance).
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyNet);

TinyNet make_net(std::uint64_t seed) {
  torch::manual_seed(seed);
  return TinyNet();
}

// Trainer t's batch at step k: fixed by (t, k), so the reference can replay it. The labels are a
// fixed linear rule of the inputs, so there is something to learn.
std::pair<torch::Tensor, torch::Tensor> batch(int trainer, int step) {
  torch::Generator rule_gen = at::detail::createCPUGenerator(42);
  const torch::Tensor rule = torch::randn({6, 3}, rule_gen);
  torch::Generator gen = at::detail::createCPUGenerator(1000 + trainer * 97 + step);
  torch::Tensor x = torch::randn({5, 6}, gen);
  torch::Tensor y = x.matmul(rule).argmax(1);
  return {x, y};
}

torch::Tensor loss_of(TinyNet& net, int trainer, int step) {
  auto [x, y] = batch(trainer, step);
  return torch::nn::functional::cross_entropy(net->forward(x), y);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        std::vector<torch::Tensor> p) {
  if (name == "sgd") return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
  if (name == "momentum") {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  if (name == "adagrad") {
    return std::make_unique<torch::optim::Adagrad>(p, torch::optim::AdagradOptions(0.1));
  }
  return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
}

Deadlines short_deadlines() {
  Deadlines d;
  d.join = milliseconds(10'000);
  d.step = milliseconds(10'000);
  d.finish = milliseconds(10'000);
  d.io = milliseconds(5'000);
  return d;
}

// S servers of one job on ephemeral ports, each holding its shard of `net`'s parameters, with
// their run() on a thread.
class Servers {
 public:
  Servers(int servers, int trainers, UpdateMode mode, const std::vector<torch::Tensor>& params,
          const std::string& optimizer, Deadlines deadlines = short_deadlines(),
          const std::function<void(ServerConfig&)>& tweak = {}, bool run = true) {
    std::vector<std::int64_t> sizes;
    for (const auto& p : params) sizes.push_back(p.numel());
    const std::vector<int> assignment = assign_shards(sizes, servers);
    for (int s = 0; s < servers; ++s) {
      ServerConfig c;
      c.index = s;
      c.servers = servers;
      c.trainers = trainers;
      c.job_id = kJob;
      c.secret = kSecret;
      c.mode = mode;
      c.deadlines = deadlines;
      if (tweak) tweak(c);
      std::vector<torch::Tensor> shard;
      for (int i : shard_of(assignment, s)) shard.push_back(params[static_cast<std::size_t>(i)]);
      servers_.push_back(std::make_unique<ParameterServer>(
          c, shard, [optimizer](std::vector<torch::Tensor> p) {
            return make_optimizer(optimizer, std::move(p));
          }));
    }
    for (auto& s : servers_) {
      if (!run) break;  // the servers serve anyway; nobody waits for their outcome
      ParameterServer* server = s.get();
      runs_.push_back(std::async(std::launch::async, [server] { return server->run(); }));
    }
  }

  std::vector<env::Endpoint> endpoints() const {
    std::vector<env::Endpoint> out;
    for (const auto& s : servers_) out.push_back(env::Endpoint{"127.0.0.1", s->port()});
    return out;
  }
  ServerReport report(int s) { return runs_[static_cast<std::size_t>(s)].get(); }
  ParameterServer& server(int s) { return *servers_[static_cast<std::size_t>(s)]; }
  // Stops server s now (its connections close), as if its process died. Only for servers made
  // with run = false (no run() in progress).
  void kill(int s) { servers_[static_cast<std::size_t>(s)].reset(); }
  ~Servers() {
    for (auto& r : runs_) {
      if (r.valid()) r.wait_for(std::chrono::seconds(30));
    }
  }

 private:
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::future<ServerReport>> runs_;
};

ClientConfig client_config(int trainer, int trainers, UpdateMode mode,
                           const std::vector<env::Endpoint>& servers,
                           Deadlines deadlines = short_deadlines()) {
  ClientConfig c;
  c.trainer_id = trainer;
  c.trainers = trainers;
  c.servers = servers;
  c.job_id = kJob;
  c.secret = kSecret;
  c.mode = mode;
  c.deadlines = deadlines;
  return c;
}

// Trains `trainers` trainers for `steps` steps through the servers; returns each trainer's final
// parameters (after finish()).
std::vector<std::vector<torch::Tensor>> train_through(Servers& servers, int trainers,
                                                      UpdateMode mode, int steps,
                                                      std::vector<ClientStats>* stats = nullptr) {
  std::vector<std::future<std::pair<std::vector<torch::Tensor>, ClientStats>>> runs;
  for (int t = 0; t < trainers; ++t) {
    runs.push_back(std::async(std::launch::async, [&, t] {
      TinyNet net = make_net(t + 50);  // different init: the servers' values must win
      ParameterClient client(client_config(t, trainers, mode, servers.endpoints()),
                             net->parameters());
      for (int k = 0; k < steps; ++k) {
        loss_of(net, t, k).backward();
        client.push_pull();
        net->zero_grad();
      }
      client.finish();
      std::vector<torch::Tensor> out;
      for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
      return std::make_pair(out, client.stats());
    }));
  }
  std::vector<std::vector<torch::Tensor>> params;
  for (auto& r : runs) {
    auto [p, s] = r.get();
    params.push_back(p);
    if (stats) stats->push_back(s);
  }
  return params;
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                  double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i].reshape({-1}) - b[i].reshape({-1})).abs().max().item<double>();
    EXPECT_LE(diff, tolerance) << "tensor " << i;
  }
}

TEST(Sharding, BalancesWholeTensorsLargestFirst) {
  const std::vector<std::int64_t> sizes{520, 20, 10000, 20, 9800, 10};
  const std::vector<int> a = assign_shards(sizes, 2);
  // 10000 -> 0, 9800 -> 1, 520 -> 1 (10320), then 20, 20 and 10 -> 0 (10050).
  EXPECT_EQ(a, (std::vector<int>{1, 0, 0, 0, 1, 0}));
  const auto load = shard_sizes(sizes, a, 2);
  EXPECT_EQ(load[0] + load[1], std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}));
  EXPECT_EQ(load, (std::vector<std::int64_t>{10050, 10320}));
  EXPECT_EQ(assign_shards(sizes, 2), a) << "deterministic";
  EXPECT_EQ(shard_of(a, 0), (std::vector<int>{1, 2, 3, 5}));
}

TEST(Sharding, EveryServerGetsWorkWhenItCan) {
  const std::vector<std::int64_t> sizes{5, 5, 5, 5};
  EXPECT_EQ(assign_shards(sizes, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(assign_shards(sizes, 1), (std::vector<int>{0, 0, 0, 0}));
  const std::vector<int> more = assign_shards({3, 2}, 3);
  EXPECT_EQ(more, (std::vector<int>{0, 1}));
  EXPECT_TRUE(shard_of(more, 2).empty());
  EXPECT_THROW(assign_shards(sizes, 0), std::invalid_argument);
  EXPECT_THROW(assign_shards({-1}, 1), std::invalid_argument);
}

TEST(Protocol, TensorsRoundTripAndMismatchesAreMalformed) {
  torch::Tensor a = torch::arange(6, torch::kFloat).reshape({2, 3});
  torch::Tensor b = torch::randn({4, 1, 2, 2}).contiguous(torch::MemoryFormat::ChannelsLast);
  net::PayloadWriter w;
  protocol::write_tensors(w, {a, b});
  const net::Bytes payload = w.take();
  net::PayloadReader r(payload, "test");
  const auto back = protocol::read_tensors(r, {6, 16}, "test");
  r.finish();
  EXPECT_TRUE(torch::equal(back[0], a.reshape({-1})));
  EXPECT_TRUE(torch::equal(back[1], b.contiguous().reshape({-1}))) << "logical element order";
  net::PayloadReader wrong(payload, "test");
  EXPECT_THROW(protocol::read_tensors(wrong, {6, 15}, "test"), net::ProtocolError);
  net::PayloadReader fewer(payload, "test");
  EXPECT_THROW(protocol::read_tensors(fewer, {6}, "test"), net::ProtocolError);
}

// Sync mode is data parallel: after N steps the parameters equal one model trained on the mean of
// the trainers' gradients with the same optimizer, for every optimizer the course names.
TEST(SyncMode, EqualsDataParallelForEveryOptimizer) {
  constexpr int kTrainers = 2;
  constexpr int kSteps = 8;
  for (const std::string optimizer : {"sgd", "momentum", "adagrad", "adam"}) {
    SCOPED_TRACE(optimizer);
    TinyNet reference = make_net(7);
    Servers servers(2, kTrainers, UpdateMode::kSync, reference->parameters(), optimizer);
    auto opt = make_optimizer(optimizer, reference->parameters());
    for (int k = 0; k < kSteps; ++k) {
      // Mean of the trainers' gradients == gradient of the mean loss.
      torch::Tensor loss = loss_of(reference, 0, k);
      for (int t = 1; t < kTrainers; ++t) loss = loss + loss_of(reference, t, k);
      (loss / kTrainers).backward();
      opt->step();
      opt->zero_grad();
    }
    std::vector<torch::Tensor> expected;
    for (const auto& p : reference->parameters()) expected.push_back(p.detach().clone());

    const auto trained = train_through(servers, kTrainers, UpdateMode::kSync, kSteps);
    expect_close(trained[0], expected, 1e-5);
    expect_close(trained[1], trained[0], 0.0);  // every trainer holds the same parameters
    const ServerReport r0 = servers.report(0);
    EXPECT_EQ(r0.updates, static_cast<std::uint64_t>(kSteps));
    EXPECT_EQ(r0.pushes, static_cast<std::uint64_t>(kSteps * kTrainers));
    EXPECT_EQ(r0.staleness_max, 0u);
    servers.report(1);
  }
}

TEST(AsyncMode, AppliesEveryPushAndReportsStaleness) {
  constexpr int kTrainers = 3;
  constexpr int kSteps = 30;
  TinyNet init = make_net(3);
  Servers servers(2, kTrainers, UpdateMode::kAsync, init->parameters(), "sgd");
  std::vector<ClientStats> stats;
  const auto trained = train_through(servers, kTrainers, UpdateMode::kAsync, kSteps, &stats);
  const ServerReport r0 = servers.report(0);
  EXPECT_EQ(r0.updates, static_cast<std::uint64_t>(kSteps * kTrainers)) << "one update per push";
  EXPECT_EQ(r0.pushes, r0.updates);
  EXPECT_LE(r0.staleness_max, static_cast<std::uint64_t>(kSteps * kTrainers));
  for (const ClientStats& s : stats) EXPECT_EQ(s.pushes, static_cast<std::uint64_t>(kSteps));
  // After finish every trainer holds the servers' final parameters, and training made progress.
  expect_close(trained[1], trained[0], 0.0);
  expect_close(trained[2], trained[0], 0.0);
  TinyNet after = make_net(3);
  {
    torch::NoGradGuard g;
    auto ps = after->parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(trained[0][i]);
  }
  double before_loss = 0, after_loss = 0;
  for (int t = 0; t < kTrainers; ++t) {
    for (int k = 0; k < kSteps; ++k) {
      before_loss += loss_of(init, t, k).item<double>();
      after_loss += loss_of(after, t, k).item<double>();
    }
  }
  EXPECT_LT(after_loss, before_loss * 0.9);
}

TEST(Checkpoint, SavedShardResumesWithItsPositionAndOptimizerState) {
  TinyNet init = make_net(11);
  // Server index -> serialized state; one element per server, as the servers save on their own
  // threads at the same time.
  std::array<std::string, 2> saved;
  auto with_storage = [&](bool load) {
    return [&, load](ServerConfig& c) {
      const int index = c.index;
      c.save = [&saved, index](torch::serialize::OutputArchive& a) {
        std::ostringstream os;
        a.save_to(os);
        saved.at(static_cast<std::size_t>(index)) = os.str();
      };
      if (load) {
        c.load = [&saved, index](torch::serialize::InputArchive& a) {
          std::istringstream is(saved.at(static_cast<std::size_t>(index)));
          a.load_from(is);
          return true;
        };
      }
    };
  };
  std::vector<torch::Tensor> after_save;
  {
    Servers servers(2, 1, UpdateMode::kSync, init->parameters(), "momentum", short_deadlines(),
                    with_storage(false));
    TinyNet net = make_net(11);
    ParameterClient client(client_config(0, 1, UpdateMode::kSync, servers.endpoints()),
                           net->parameters());
    EXPECT_EQ(client.saved_position(), "");
    for (int k = 0; k < 3; ++k) {
      loss_of(net, 0, k).backward();
      client.push_pull();
      net->zero_grad();
    }
    client.save("epoch=0,batch=3");
    // Two more steps: a resumed run must redo exactly these.
    for (int k = 3; k < 5; ++k) {
      loss_of(net, 0, k).backward();
      client.push_pull();
      net->zero_grad();
    }
    client.finish();
    for (const auto& p : net->parameters()) after_save.push_back(p.detach().clone());
  }
  ASSERT_FALSE(saved[0].empty());
  ASSERT_FALSE(saved[1].empty());
  Servers resumed(2, 1, UpdateMode::kSync, init->parameters(), "momentum", short_deadlines(),
                  with_storage(true));
  {
    TinyNet net = make_net(99);
    ParameterClient client(client_config(0, 1, UpdateMode::kSync, resumed.endpoints()),
                           net->parameters());
    EXPECT_EQ(client.saved_position(), "epoch=0,batch=3");
    EXPECT_EQ(client.stats().version, 3u);
    for (int k = 3; k < 5; ++k) {
      loss_of(net, 0, k).backward();
      client.push_pull();
      net->zero_grad();
    }
    client.finish();
    std::vector<torch::Tensor> now;
    for (const auto& p : net->parameters()) now.push_back(p.detach().clone());
    expect_close(now, after_save, 0.0);  // momentum buffers came back too
  }
  EXPECT_TRUE(resumed.report(0).resumed);
}

TEST(Checkpoint, StateOfAnotherShardIsRefused) {
  TinyNet init = make_net(1);
  std::string state;
  {
    ServerConfig c;
    c.trainers = 1;
    c.job_id = kJob;
    c.save = [&](torch::serialize::OutputArchive& a) {
      std::ostringstream os;
      a.save_to(os);
      state = os.str();
    };
    ParameterServer server(c, init->parameters(), [](std::vector<torch::Tensor> p) {
      return make_optimizer("sgd", std::move(p));
    });
    auto run = std::async(std::launch::async, [&] { return server.run(); });
    {
      ClientConfig cc = client_config(0, 1, UpdateMode::kSync, {{"127.0.0.1", server.port()}});
      cc.secret = "";
      ParameterClient client(cc, init->parameters());
      client.save("p");
      client.finish();
    }
    run.get();
  }
  ServerConfig other;
  other.trainers = 2;  // another job shape
  other.job_id = kJob;
  other.load = [&](torch::serialize::InputArchive& a) {
    std::istringstream is(state);
    a.load_from(is);
    return true;
  };
  try {
    ParameterServer server(other, init->parameters(), [](std::vector<torch::Tensor> p) {
      return make_optimizer("sgd", std::move(p));
    });
    FAIL() << "a state for 1 trainer was loaded by a server of 2";
  } catch (const PsError& e) {
    EXPECT_NE(std::string(e.what()).find("trainers is '1', this server's is '2'"),
              std::string::npos)
        << e.what();
  }
}

// A trainer whose process dies (its connection closes before it finished) fails the server, and
// the trainer waiting for that step hears who is gone.
TEST(Failures, DeadTrainerIsNamedOnTheServerAndTheOtherTrainer) {
  TinyNet init = make_net(5);
  Servers servers(1, 2, UpdateMode::kSync, init->parameters(), "sgd");
  TinyNet net0 = make_net(5);
  auto survivor = std::async(std::launch::async, [&] {
    ParameterClient client(client_config(0, 2, UpdateMode::kSync, servers.endpoints()),
                           net0->parameters());
    loss_of(net0, 0, 0).backward();
    client.push_pull();  // waits for trainer 1, which dies
  });
  {
    TinyNet net1 = make_net(5);
    ParameterClient doomed(client_config(1, 2, UpdateMode::kSync, servers.endpoints()),
                           net1->parameters());
  }  // its connection closes here without finish()
  const auto started = std::chrono::steady_clock::now();
  try {
    survivor.get();
    FAIL() << "the push of the survivor succeeded";
  } catch (const PsError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("trainer 1"), std::string::npos) << what;
    EXPECT_NE(what.find("closed its connection before it finished"), std::string::npos) << what;
  }
  EXPECT_LT(testing::elapsed_ms(started), 5'000);
  EXPECT_THROW(servers.report(0), PsError);
}

TEST(Failures, StalledTrainerFailsTheStepWithinTheDeadline) {
  TinyNet init = make_net(5);
  Deadlines d = short_deadlines();
  d.step = milliseconds(400);
  Servers servers(1, 2, UpdateMode::kSync, init->parameters(), "sgd", d);
  TinyNet net0 = make_net(5), net1 = make_net(5);
  ParameterClient silent(client_config(1, 2, UpdateMode::kSync, servers.endpoints(), d),
                         net1->parameters());  // registers, then never pushes
  ParameterClient client(client_config(0, 2, UpdateMode::kSync, servers.endpoints(), d),
                         net0->parameters());
  loss_of(net0, 0, 0).backward();
  const auto started = std::chrono::steady_clock::now();
  try {
    client.push_pull();
    FAIL() << "a step without trainer 1 completed";
  } catch (const PsError& e) {
    // Either deadline may notice first: the open step or the silent trainer.
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no gradients from trainer(s) 1") != std::string::npos ||
                what.find("trainer 1 (") != std::string::npos)
        << what;
  }
  EXPECT_LT(testing::elapsed_ms(started), 3'000);
  EXPECT_THROW(servers.report(0), PsError);
}

TEST(Failures, DeadServerIsNamedOnTheTrainer) {
  TinyNet init = make_net(5);
  Servers servers(2, 1, UpdateMode::kSync, init->parameters(), "sgd", short_deadlines(), {},
                  /*run=*/false);
  TinyNet net = make_net(5);
  ParameterClient client(client_config(0, 1, UpdateMode::kSync, servers.endpoints()),
                         net->parameters());
  servers.kill(1);
  loss_of(net, 0, 0).backward();
  try {
    client.push_pull();
    FAIL() << "a push to a dead server succeeded";
  } catch (const PsError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter server 1"), std::string::npos) << e.what();
  }
}

TEST(Failures, TrainerNotJoiningFailsTheServer) {
  TinyNet init = make_net(5);
  Deadlines d = short_deadlines();
  d.join = milliseconds(300);
  Servers servers(1, 2, UpdateMode::kSync, init->parameters(), "sgd", d);
  try {
    servers.report(0);
    FAIL() << "the server ran without its trainers";
  } catch (const PsError& e) {
    EXPECT_NE(std::string(e.what()).find("trainer(s) 0, 1 did not register"), std::string::npos)
        << e.what();
  }
}

TEST(Failures, MismatchedModelIsRefusedWithBothShapes) {
  TinyNet init = make_net(5);
  Servers servers(1, 1, UpdateMode::kSync, init->parameters(), "sgd");
  torch::nn::Linear other(3, 3);
  try {
    ParameterClient client(client_config(0, 1, UpdateMode::kSync, servers.endpoints()),
                           other->parameters());
    FAIL() << "a different model registered";
  } catch (const PsError& e) {
    EXPECT_NE(std::string(e.what()).find("shard tensor sizes [9,3]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(servers.report(0), PsError);
}

TEST(Failures, SyncTrainersWithDifferentStepCountsFail) {
  TinyNet init = make_net(5);
  Servers servers(1, 2, UpdateMode::kSync, init->parameters(), "sgd");
  TinyNet net0 = make_net(5), net1 = make_net(5);
  auto longer = std::async(std::launch::async, [&] {
    ParameterClient client(client_config(0, 2, UpdateMode::kSync, servers.endpoints()),
                           net0->parameters());
    for (int k = 0; k < 2; ++k) {
      loss_of(net0, 0, k).backward();
      client.push_pull();
    }
  });
  ParameterClient shorter(client_config(1, 2, UpdateMode::kSync, servers.endpoints()),
                          net1->parameters());
  loss_of(net1, 1, 0).backward();
  shorter.push_pull();
  EXPECT_THROW(shorter.finish(), PsError);
  try {
    longer.get();
    FAIL();
  } catch (const PsError& e) {
    EXPECT_NE(std::string(e.what()).find("same number of steps"), std::string::npos) << e.what();
  }
}

// Bad frames: garbage bytes, a request before registering, a malformed push, a hello from a rank
// that is not a trainer, a wrong secret. Each costs its own connection only; the job goes on.
TEST(Failures, BadFramesCostOnlyTheirConnection) {
  TinyNet init = make_net(5);
  Servers servers(1, 1, UpdateMode::kSync, init->parameters(), "sgd");
  const env::Endpoint ep = servers.endpoints()[0];
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), ep.port});
    const std::string junk = "GET / HTTP/1.1\r\n\r\n";
    boost::asio::write(socket, boost::asio::buffer(junk));
  }
  auto raw = [&](int rank, const std::string& secret) {
    net::ClientOptions o;
    o.endpoint = ep;
    o.job_id = kJob;
    o.secret = secret;
    o.service = net::Service::kParameterServer;
    o.server_name = "parameter server 0";
    o.rank = rank;
    o.connect_timeout = milliseconds(5'000);
    o.io_timeout = milliseconds(5'000);
    return std::make_unique<net::FramedClient>(o);
  };
  auto push_op = protocol::byte(protocol::Op::kPush);
  EXPECT_THROW(raw(0, kSecret)->request(push_op, {}, milliseconds(0), {push_op}, "push"),
               net::NetError);
  EXPECT_THROW(raw(7, kSecret)->request(protocol::byte(protocol::Op::kPull), {}, milliseconds(0),
                                        {protocol::byte(protocol::Op::kParams)}, "pull"),
               net::NetError);
  EXPECT_THROW(raw(0, "wrong"), net::RefusedError);
  ASSERT_TRUE(testing::wait_until([&] { return servers.server(0).dropped_connections() >= 4; },
                                  milliseconds(5'000)));
  // None of that registered trainer 0, which now trains normally.
  {
    TinyNet net = make_net(5);
    ParameterClient client(client_config(0, 1, UpdateMode::kSync, servers.endpoints()),
                           net->parameters());
    loss_of(net, 0, 0).backward();
    client.push_pull();
    client.finish();
  }
  EXPECT_EQ(servers.report(0).updates, 1u);
}

}  // namespace
}  // namespace ddl::ps
