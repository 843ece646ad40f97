// Training checkpoints: the model's parameters and buffers, the optimizer's state and where the
// run is (epoch, batch within it, global step), in one LibTorch archive.
//
// Writes are atomic: the archive goes to a temporary file in the checkpoint's own folder, is
// fsync'ed, then renamed over the target (and the folder fsync'ed). A crash at any point leaves
// either the previous checkpoint or the new one, never a torn file; a failed write removes its
// temporary file. The position is recorded per batch so a job that `launch --max_restarts`
// restarted can continue mid-epoch: the sampler's order depends only on (seed, epoch), so skipping
// `batch` batches of `epoch` reproduces the rest of the epoch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "env/error.h"

namespace ddl::mnist {

// A program ends with kExitBadCheckpoint for it.
class CheckpointError : public Error {
 public:
  CheckpointError(std::string file, const std::string& detail);
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// Where training stands. A checkpoint taken after the last batch of epoch E says {E + 1, 0, ...}.
struct TrainingPosition {
  std::int64_t epoch = 0;        // the epoch to continue in
  std::int64_t batch = 0;        // the next batch index within `epoch`
  std::int64_t global_step = 0;  // optimizer steps taken so far, over all epochs
  std::string optimizer;         // the optimizer's name (sgd, momentum, ...), checked on load
  std::uint64_t seed = 0;        // the sampler seed, checked on load
  std::int64_t world_size = 1;   // informational: the world that wrote it
};

// Writes `module` + `optimizer` + `position` to `path` atomically. Throws CheckpointError (the
// folder does not exist or is not writable, the disk is full, ...).
void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingPosition& position);

// Restores `module` and `optimizer` in place from `path` (tensors land on `device`) and returns the
// position. `module` and `optimizer` must have the same structure as the ones saved. Throws
// CheckpointError: missing or unreadable file, not a checkpoint of this program, a different
// optimizer or seed than `expected` names (an empty optimizer name skips that check).
TrainingPosition load_checkpoint(const std::string& path, torch::nn::Module& module,
                                 torch::optim::Optimizer& optimizer, const torch::Device& device,
                                 const TrainingPosition& expected);

// The same from the bytes of a checkpoint file (what rank 0 read and broadcast to the others);
// `name` names it in errors.
TrainingPosition load_checkpoint_bytes(const std::string& bytes, const std::string& name,
                                       torch::nn::Module& module,
                                       torch::optim::Optimizer& optimizer,
                                       const torch::Device& device,
                                       const TrainingPosition& expected);

// The atomic write and the checked read under both, for other archives (a parameter server's
// shard): write_archive throws CheckpointError like save_checkpoint; read_archive throws it for a
// missing or unreadable file.
void write_archive(const std::string& path, torch::serialize::OutputArchive& archive);
void read_archive(const std::string& path, torch::serialize::InputArchive& archive,
                  const torch::Device& device = torch::kCPU);

// The name save_checkpoint (and write_archive) uses for its temporary file next to `path` (for tests and cleanup).
std::string checkpoint_temp_path(const std::string& path);

}  // namespace ddl::mnist
