// The course's net (shapes, parameter count, loss), the optimizers, the checksum and checkpoints
// (round trip, atomic write, refusal of mismatched checkpoints, damaged files detected before
// LibTorch reads them, the fallback to the previous checkpoint, stale temporaries removed).
#include "examples/mnist/mnist_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "examples/mnist/checkpoint.h"
#include "tests/support/temp_dir.h"

namespace ddl::mnist {
namespace {

namespace fs = std::filesystem;

using ddl::testing::TempDir;

// One training step on random data, so the optimizer has state (momentum buffers, Adam moments).
void train_step(MnistNet& net, torch::optim::Optimizer& opt, std::uint64_t seed) {
  torch::manual_seed(seed);
  const auto x = torch::randn({8, 1, 28, 28});
  const auto y = torch::randint(0, 10, {8}, torch::kInt64);
  opt.zero_grad();
  cross_entropy(net->forward(x), y).backward();
  opt.step();
}

void expect_same_parameters(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    ASSERT_TRUE(pb.contains(item.key())) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
}

TEST(MnistNet, OutputShapeAndParameterCount) {
  MnistNet net;
  const auto logits = net->forward(torch::zeros({5, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{5, 10}));
  EXPECT_EQ(parameter_count(*net), kMnistNetParameters);
  EXPECT_EQ(parameter_count(*net), 20 * 1 * 25 + 20 + 20 * 20 * 25 + 20 + 980 * 10 + 10);
  const auto params = net->named_parameters();
  EXPECT_EQ(params["conv1.weight"].sizes(), (std::vector<std::int64_t>{20, 1, 5, 5}));
  EXPECT_EQ(params["conv2.weight"].sizes(), (std::vector<std::int64_t>{20, 20, 5, 5}));
  EXPECT_EQ(params["fc.weight"].sizes(), (std::vector<std::int64_t>{10, 980}));
}

// The course's net written the plain way: NCHW weights, relu before each pool.
torch::Tensor reference_forward(MnistNet& net, const torch::Tensor& x) {
  auto p = net->named_parameters();
  auto conv = [&](const torch::Tensor& in, const std::string& name) {
    return torch::conv2d(in, p[name + ".weight"].contiguous(), p[name + ".bias"], 1, 2);
  };
  auto y = torch::max_pool2d(torch::relu(conv(x, "conv1")), 2, 2);
  y = torch::max_pool2d(torch::relu(conv(y, "conv2")), 2, 2);
  return torch::linear(y.reshape({y.size(0), 980}), p["fc.weight"], p["fc.bias"]);
}

TEST(MnistNet, ChannelsLastLayoutComputesTheSeedsNet) {
  torch::manual_seed(3);
  MnistNet net;
  for (const char* name : {"conv1.weight", "conv2.weight"}) {
    const torch::Tensor w = net->named_parameters()[name];
    // NHWC strides, also for conv1 whose single input channel makes both layouts "contiguous".
    EXPECT_EQ(w.stride(1), 1) << name;
    EXPECT_EQ(w.stride(0), w.size(1) * w.size(2) * w.size(3)) << name;
  }
  const auto x = torch::randn({6, 1, 28, 28});
  const auto labels = torch::randint(0, 10, {6}, torch::kInt64);
  const auto ours = net->forward(x);
  const auto plain = reference_forward(net, x);
  EXPECT_TRUE(torch::allclose(ours, plain, 1e-5, 1e-5)) << (ours - plain).abs().max();

  // Same gradients too (pool before relu sends them to the same elements).
  cross_entropy(ours, labels).backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& item : net->named_parameters()) {
    grads[item.key()] = item.value().grad().clone();
    item.value().mutable_grad() = torch::Tensor();
  }
  cross_entropy(reference_forward(net, x), labels).backward();
  for (const auto& item : net->named_parameters()) {
    EXPECT_TRUE(torch::allclose(grads[item.key()], item.value().grad(), 1e-5, 1e-6)) << item.key();
  }

  // A checkpoint or to() may bring NCHW weights back; use_channels_last() restores the layout.
  auto w = net->named_parameters()["conv2.weight"];
  w.set_data(w.contiguous());
  ASSERT_NE(w.stride(1), 1);
  net->use_channels_last();
  EXPECT_EQ(w.stride(1), 1);
  EXPECT_TRUE(torch::allclose(net->forward(x), plain, 1e-5, 1e-5));
}

TEST(MnistNet, CrossEntropyMatchesTheDefinitionAndIsStable) {
  const auto logits = torch::tensor({{1.0f, 2.0f, 3.0f}, {0.5f, 0.0f, -1.0f}});
  const auto labels = torch::tensor({2, 0}, torch::kInt64);
  const auto p = torch::softmax(logits, 1);
  const double expected =
      -(std::log(p[0][2].item<double>()) + std::log(p[1][0].item<double>())) / 2.0;
  EXPECT_NEAR(cross_entropy(logits, labels).item<double>(), expected, 1e-6);
  // Huge logits: a naive softmax overflows to inf/nan; log_softmax does not.
  const auto big = torch::tensor({{1000.0f, 0.0f}, {0.0f, 1000.0f}});
  const auto loss = cross_entropy(big, torch::tensor({0, 0}, torch::kInt64)).item<double>();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, 500.0, 1e-3);
}

TEST(MnistNet, OptimizersByName) {
  MnistNet net;
  for (const std::string name : {"sgd", "momentum", "adagrad", "adam"}) {
    auto opt = make_optimizer(name, net->parameters(), 0.01);
    ASSERT_NE(opt, nullptr) << name;
    EXPECT_DOUBLE_EQ(opt->param_groups()[0].options().get_lr(), 0.01) << name;
  }
  auto momentum = make_optimizer("momentum", net->parameters(), 0.01);
  EXPECT_DOUBLE_EQ(
      static_cast<torch::optim::SGDOptions&>(momentum->param_groups()[0].options()).momentum(),
      0.9);
  EXPECT_THROW(make_optimizer("rmsprop", net->parameters(), 0.01), std::invalid_argument);
}

TEST(MnistNet, EvaluateCountsCorrectPredictions) {
  MnistNet net;
  Dataset data{torch::randn({25, 1, 28, 28}), torch::zeros({25}, torch::kInt64)};
  torch::NoGradGuard no_grad;
  const auto predicted = net->forward(data.images).argmax(1);
  data.labels = predicted.clone();
  data.labels.narrow(0, 0, 5).add_(1).remainder_(10);  // make the first five wrong
  const Accuracy acc = evaluate(net, data, /*batch=*/7);
  EXPECT_EQ(acc.total, 25);
  EXPECT_EQ(acc.correct, 20);
  EXPECT_TRUE(net->is_training());
}

TEST(MnistNet, ChecksumIsDeterministicAndSeesEveryChange) {
  torch::manual_seed(1);
  MnistNet a;
  torch::manual_seed(1);
  MnistNet b;
  const ParamChecksum ca = param_checksum(*a);
  EXPECT_EQ(ca.hash, param_checksum(*b).hash);
  EXPECT_EQ(ca.sum, param_checksum(*b).sum);
  EXPECT_EQ(ca.hex().size(), 16u);
  {
    torch::NoGradGuard no_grad;
    b->named_parameters()["fc.bias"][3].add_(1e-6f);
  }
  EXPECT_NE(ca.hash, param_checksum(*b).hash);
}

TEST(Checkpoint, RoundTripRestoresParametersOptimizerAndPosition) {
  TempDir dir;
  const std::string path = dir.file("mnist.pt");
  MnistNet net;
  auto opt = make_optimizer("momentum", net->parameters(), 0.01);
  train_step(net, *opt, 7);
  TrainingPosition pos{3, 42, 642, "momentum", 99, 2};
  save_checkpoint(path, *net, *opt, pos);
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"mnist.pt"}));  // no temporary left

  MnistNet restored;
  auto restored_opt = make_optimizer("momentum", restored->parameters(), 0.01);
  const TrainingPosition got =
      load_checkpoint(path, *restored, *restored_opt, torch::kCPU, {0, 0, 0, "momentum", 99, 1});
  EXPECT_EQ(got.epoch, 3);
  EXPECT_EQ(got.batch, 42);
  EXPECT_EQ(got.global_step, 642);
  EXPECT_EQ(got.optimizer, "momentum");
  EXPECT_EQ(got.seed, 99u);
  EXPECT_EQ(got.world_size, 2);
  expect_same_parameters(*net, *restored);
  EXPECT_EQ(param_checksum(*net).hash, param_checksum(*restored).hash);

  // The momentum buffers came back too: one more identical step keeps both nets identical.
  train_step(net, *opt, 8);
  train_step(restored, *restored_opt, 8);
  expect_same_parameters(*net, *restored);
}

TEST(Checkpoint, AdamStateRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("adam.pt");
  MnistNet net;
  auto opt = make_optimizer("adam", net->parameters(), 0.01);
  train_step(net, *opt, 1);
  train_step(net, *opt, 2);
  save_checkpoint(path, *net, *opt, {1, 0, 2, "adam", 5, 1});
  MnistNet restored;
  auto restored_opt = make_optimizer("adam", restored->parameters(), 0.01);
  load_checkpoint(path, *restored, *restored_opt, torch::kCPU, {0, 0, 0, "adam", 5, 1});
  train_step(net, *opt, 3);
  train_step(restored, *restored_opt, 3);
  expect_same_parameters(*net, *restored);
}

TEST(Checkpoint, OverwriteReplacesAtomicallyAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("ck");
  MnistNet net;
  auto opt = make_optimizer("sgd", net->parameters(), 0.01);
  save_checkpoint(path, *net, *opt, {0, 0, 0, "sgd", 1, 1});
  // A stale temporary from a writer killed mid-write is replaced, never loaded.
  std::ofstream(checkpoint_temp_path(path)) << "torn";
  train_step(net, *opt, 3);
  save_checkpoint(path, *net, *opt, {1, 0, 600, "sgd", 1, 1});
  // The replaced checkpoint is kept as the previous one.
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ck", "ck.prev"}));
  MnistNet restored;
  auto restored_opt = make_optimizer("sgd", restored->parameters(), 0.01);
  EXPECT_EQ(load_checkpoint(path, *restored, *restored_opt, torch::kCPU, {0, 0, 0, "sgd", 1, 1})
                .global_step,
            600);
  expect_same_parameters(*net, *restored);
}

TEST(Checkpoint, FailedWriteKeepsThePreviousCheckpointAndNoTemporary) {
  TempDir dir;
  MnistNet net;
  auto opt = make_optimizer("sgd", net->parameters(), 0.01);
  EXPECT_THROW(save_checkpoint(dir.file("no/such/dir/ck"), *net, *opt, {0, 0, 0, "sgd", 1, 1}),
               CheckpointError);
  EXPECT_TRUE(dir.entries().empty());

  // The target is a folder: rename fails after the data was written; the temporary is removed.
  fs::create_directory(dir.file("ck"));
  EXPECT_THROW(save_checkpoint(dir.file("ck"), *net, *opt, {0, 0, 0, "sgd", 1, 1}),
               CheckpointError);
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ck"}));
}

// Links planted as the checkpoint's temporary and as the checkpoint itself: neither
// target is written; the checkpoint is a file of its own that loads.
TEST(Checkpoint, PlantedLinksAreNotWrittenThrough) {
  TempDir dir, outside("ddl_ckpt_outside");
  const fs::path precious = outside.path() / "precious";
  std::ofstream(precious) << "precious";
  const std::string path = dir.file("ck");
  fs::create_symlink(precious, checkpoint_temp_path(path));
  fs::create_symlink(precious, path);
  MnistNet net;
  auto opt = make_optimizer("sgd", net->parameters(), 0.01);
  save_checkpoint(path, *net, *opt, {0, 0, 7, "sgd", 1, 1});
  std::ifstream in(precious);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ck"}));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path)));
  MnistNet restored;
  auto restored_opt = make_optimizer("sgd", restored->parameters(), 0.01);
  EXPECT_EQ(load_checkpoint(path, *restored, *restored_opt, torch::kCPU, {0, 0, 0, "sgd", 1, 1})
                .global_step,
            7);
}

TEST(Checkpoint, RefusesMissingForeignAndMismatchedCheckpoints) {
  TempDir dir;
  MnistNet net;
  auto opt = make_optimizer("sgd", net->parameters(), 0.01);
  const TrainingPosition expected{0, 0, 0, "sgd", 1, 1};
  EXPECT_THROW(load_checkpoint(dir.file("none"), *net, *opt, torch::kCPU, expected),
               CheckpointError);

  std::ofstream(dir.file("garbage")) << "not an archive";
  EXPECT_THROW(load_checkpoint(dir.file("garbage"), *net, *opt, torch::kCPU, expected),
               CheckpointError);

  save_checkpoint(dir.file("sgd.pt"), *net, *opt, expected);
  auto adam = make_optimizer("adam", net->parameters(), 0.01);
  try {
    load_checkpoint(dir.file("sgd.pt"), *net, *adam, torch::kCPU, {0, 0, 0, "adam", 1, 1});
    ADD_FAILURE() << "loaded an sgd checkpoint into an adam run";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'sgd'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'adam'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_checkpoint(dir.file("sgd.pt"), *net, *opt, torch::kCPU, {0, 0, 0, "sgd", 2, 1}),
               CheckpointError);

  // A module of another shape.
  torch::nn::Linear other(3, 4);
  auto other_opt = make_optimizer("sgd", other->parameters(), 0.01);
  EXPECT_THROW(load_checkpoint(dir.file("sgd.pt"), *other, *other_opt, torch::kCPU, expected),
               CheckpointError);
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A checkpoint of a trained net at step `step`, at `path`.
void save_at_step(const std::string& path, std::int64_t step) {
  MnistNet net;
  auto opt = make_optimizer("momentum", net->parameters(), 0.01);
  train_step(net, *opt, static_cast<std::uint64_t>(step));
  save_checkpoint(path, *net, *opt, {0, step, step, "momentum", 3, 1});
}

std::int64_t step_of(const std::string& bytes, const std::string& name) {
  MnistNet net;
  auto opt = make_optimizer("momentum", net->parameters(), 0.01);
  return load_checkpoint_bytes(bytes, name, *net, *opt, torch::kCPU, {0, 0, 0, "momentum", 3, 1})
      .global_step;
}

// Loads `path` expecting a CheckpointError that names the file and says `check`.
void expect_refused(const std::string& path, const std::string& check) {
  MnistNet net;
  auto opt = make_optimizer("momentum", net->parameters(), 0.01);
  try {
    load_checkpoint(path, *net, *opt, torch::kCPU, {0, 0, 0, "momentum", 3, 1});
    ADD_FAILURE() << "loaded a damaged checkpoint (" << check << ")";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), path);
    EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(check), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(e.exit_code(), kExitBadCheckpoint);
  }
}

TEST(Checkpoint, DamageIsDetectedBeforeLibTorchReadsNamingTheFileAndTheCheck) {
  TempDir dir;
  const std::string good = dir.file("good.pt");
  MnistNet net;
  auto net_opt = make_optimizer("momentum", net->parameters(), 0.01);
  train_step(net, *net_opt, 5);
  save_checkpoint(good, *net, *net_opt, {0, 5, 5, "momentum", 3, 1});
  const std::string bytes = bytes_of(good);
  ASSERT_GT(bytes.size(), 80'000u);  // the net's ~20k float parameters and as many momentums
  ASSERT_EQ(bytes.compare(0, 8, "DDLCKPT1"), 0);
  EXPECT_EQ(step_of(bytes, good), 5);

  // A byte of fc's weights, found by their first 64 bytes (the model is written before the
  // optimizer's momentum buffers).
  const torch::Tensor fc = net->named_parameters()["fc.weight"].contiguous();
  const std::size_t fc_at = bytes.find(std::string(static_cast<const char*>(fc.data_ptr()), 64));
  ASSERT_NE(fc_at, std::string::npos);
  const std::size_t in_tensors = fc_at + 33;
  {
    // The reason for the checksum: LibTorch alone loads the flipped archive, with other weights.
    std::string content = bytes.substr(24);
    content[in_tensors - 24] = static_cast<char>(content[in_tensors - 24] ^ 0x40);
    torch::serialize::InputArchive archive;
    archive.load_from(content.data(), content.size());
    torch::serialize::InputArchive model;
    archive.read("model", model);
    MnistNet flipped, intact;
    flipped->load(model);
    auto opt = make_optimizer("momentum", intact->parameters(), 0.01);
    load_checkpoint(good, *intact, *opt, torch::kCPU, {0, 0, 0, "momentum", 3, 1});
    EXPECT_NE(param_checksum(*flipped).hash, param_checksum(*intact).hash);
  }
  struct Damage {
    std::string name;
    std::function<void(std::string&)> apply;
    std::string check;
  };
  const std::vector<Damage> damages = {
      {"flipped_tensor_byte", [&](std::string& b) { b[in_tensors] ^= 0x01; },
       "content CRC-32 check failed"},
      {"zeroed_range",
       [&](std::string& b) {
         std::fill(b.begin() + 3 * b.size() / 4, b.begin() + 3 * b.size() / 4 + 512, '\0');
       },
       "content CRC-32 check failed"},
      {"flipped_archive_header_byte", [](std::string& b) { b[24 + 2] ^= 0x10; },
       "content CRC-32 check failed"},
      {"flipped_magic_byte", [](std::string& b) { b[3] ^= 0x01; }, "expected magic 'DDLCKPT1'"},
      {"flipped_length_byte", [](std::string& b) { b[9] ^= 0x01; }, "header check failed"},
      {"flipped_crc_byte", [](std::string& b) { b[17] ^= 0x01; }, "header check failed"},
      {"truncated", [](std::string& b) { b.resize(b.size() - 100); }, "(truncated)"},
      {"truncated_to_the_header", [](std::string& b) { b.resize(10); }, "(truncated?)"},
      {"empty", [](std::string& b) { b.clear(); }, "header check failed"},
      {"bare_libtorch_archive", [](std::string& b) { b.erase(0, 24); },
       "a LibTorch archive without a checksum header"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    std::string damaged = bytes;
    d.apply(damaged);
    const std::string path = dir.file(d.name + ".pt");
    write_bytes(path, damaged);
    expect_refused(path, d.check);
  }
  // The header's length field has its own check when the header's CRC is made to match.
  std::string longer = bytes + "extra";
  write_bytes(dir.file("extended.pt"), longer);
  expect_refused(dir.file("extended.pt"), "length check failed");
}

TEST(Checkpoint, ADamagedCheckpointFallsBackToThePreviousOneNamingBoth) {
  TempDir dir;
  const std::string path = dir.file("ck.pt"), prev = dir.file("ck.prev.pt");
  EXPECT_EQ(previous_checkpoint_path(path), prev);
  EXPECT_FALSE(choose_checkpoint(path).has_value());  // nothing yet

  save_at_step(path, 10);
  save_at_step(path, 20);
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ck.pt", "ck.prev.pt"}));
  std::optional<CheckpointChoice> choice = choose_checkpoint(path);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->file, path);
  EXPECT_TRUE(choice->warning.empty());
  EXPECT_EQ(step_of(choice->bytes, choice->file), 20);

  // The newest is damaged: the previous one is used, the warning names both and the check, and
  // the bad one is moved aside so that the next save does not keep it as the previous one.
  std::string bytes = bytes_of(path);
  bytes[bytes.size() / 2] ^= 0x20;
  write_bytes(path, bytes);
  choice = choose_checkpoint(path);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->file, prev);
  EXPECT_EQ(step_of(choice->bytes, choice->file), 10);
  for (const std::string& part :
       std::vector<std::string>{"'" + path + "'", "content CRC-32 check failed",
                                "previous checkpoint '" + prev + "'", path + ".bad"}) {
    EXPECT_NE(choice->warning.find(part), std::string::npos) << choice->warning;
  }
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ck.pt.bad", "ck.prev.pt"}));
  // The next save keeps the good previous one.
  save_at_step(path, 30);
  EXPECT_EQ(step_of(bytes_of(prev), prev), 10);
  EXPECT_EQ(step_of(bytes_of(path), path), 30);

  // Both damaged: one line naming the checkpoint, its check and the previous one's.
  for (const std::string& file : {path, prev}) {
    std::string b = bytes_of(file);
    b.resize(b.size() - 1);
    write_bytes(file, b);
  }
  try {
    choose_checkpoint(path);
    ADD_FAILURE() << "chose a damaged checkpoint";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), path);
    EXPECT_NE(what.find("length check failed"), std::string::npos) << what;
    EXPECT_NE(what.find("the previous checkpoint '" + prev + "' is no good either"),
              std::string::npos)
        << what;
  }
  // Damaged with no previous one at all.
  fs::remove(prev);
  try {
    choose_checkpoint(path);
    ADD_FAILURE() << "chose a damaged checkpoint";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no previous checkpoint"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, OnlyThePreviousCheckpointLeftIsUsedWithAWarning) {
  TempDir dir;
  const std::string path = dir.file("shard"), prev = dir.file("shard.prev");
  EXPECT_EQ(previous_checkpoint_path(path), prev);
  save_at_step(path, 4);
  fs::rename(path, prev);  // a crash between the renames of a file system without hard links
  const std::optional<CheckpointChoice> choice = choose_checkpoint(path);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->file, prev);
  EXPECT_NE(choice->warning.find("found none"), std::string::npos) << choice->warning;
}

TEST(Checkpoint, StaleTemporariesOfAKilledWriterAreRemoved) {
  TempDir dir;
  const std::string path = dir.file("ck.pt");
  EXPECT_TRUE(remove_stale_temporaries(path).empty());
  save_at_step(path, 1);
  write_bytes(checkpoint_temp_path(path), "torn");
  EXPECT_EQ(remove_stale_temporaries(path), std::vector<std::string>{checkpoint_temp_path(path)});
  EXPECT_EQ(dir.entries(), (std::set<std::string>{"ck.pt"}));
}

}  // namespace
}  // namespace ddl::mnist
