// Training checkpoints: the model's parameters and buffers, the optimizer's state and where the
// run is (epoch, batch within it, global step), in one LibTorch archive behind a checksummed
// header.
//
// On disk a checkpoint is a 24-byte header, then the LibTorch archive (the content):
//   bytes 0-7    magic "DDLCKPT1"
//   bytes 8-15   the content's length in bytes, little-endian
//   bytes 16-19  CRC-32 (zlib's) of the content, little-endian
//   bytes 20-23  CRC-32 of bytes 0-19, little-endian
// Every read checks the header and the content before LibTorch sees a byte (LibTorch does not
// check its archive's own CRCs, so damaged tensor data would otherwise load as wrong weights):
// a damaged, truncated or foreign file is a CheckpointError naming the file and the check that
// failed. CRC-32 catches accidental damage (every burst up to 32 bits, anything else but for one
// chance in 2^32); it is no defence against someone who can write the file.
//
// Writes are atomic: the whole file is built in memory, written to <path>.tmp in the
// checkpoint's own folder, fsync'ed, then renamed over <path> (and the folder fsync'ed). The
// checkpoint it replaces is kept as the previous one (previous_checkpoint_path), so a reader can
// fall back to it. A failed write (a full disk included) removes its temporary file and leaves
// both checkpoints as they were. The position is recorded per batch so a job that `launch
// --max_restarts` restarted can continue mid-epoch: the sampler's order depends only on (seed,
// epoch), so skipping `batch` batches of `epoch` reproduces the rest of the epoch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

// Writes `module` + `optimizer` + `position` to `path` atomically, keeping the checkpoint it
// replaces as previous_checkpoint_path(path). Throws CheckpointError (the folder does not exist
// or is not writable, the disk is full, ...); `path` and its previous one are then untouched.
void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingPosition& position);

// Restores `module` and `optimizer` in place from `path` (tensors land on `device`) and returns the
// position. `module` and `optimizer` must have the same structure as the ones saved. Throws
// CheckpointError: missing or unreadable file, a failed header or content check, not a checkpoint
// of this program, a different optimizer or seed than `expected` names (an empty optimizer name
// skips that check).
TrainingPosition load_checkpoint(const std::string& path, torch::nn::Module& module,
                                 torch::optim::Optimizer& optimizer, const torch::Device& device,
                                 const TrainingPosition& expected);

// The same from the bytes of a checkpoint file, header included (what rank 0 read and broadcast
// to the others: each rank checks them again); `name` names it in errors.
TrainingPosition load_checkpoint_bytes(const std::string& bytes, const std::string& name,
                                       torch::nn::Module& module,
                                       torch::optim::Optimizer& optimizer,
                                       const torch::Device& device,
                                       const TrainingPosition& expected);

// The atomic, checksummed write and the checked read under both, for other archives (a
// parameter server's shard): write_archive throws CheckpointError like save_checkpoint;
// read_archive and read_archive_bytes throw it for a missing or unreadable file or a failed check.
void write_archive(const std::string& path, torch::serialize::OutputArchive& archive);
void read_archive(const std::string& path, torch::serialize::InputArchive& archive,
                  const torch::Device& device = torch::kCPU);
void read_archive_bytes(const std::string& bytes, const std::string& name,
                        torch::serialize::InputArchive& archive,
                        const torch::Device& device = torch::kCPU);

// The file's header and content checked: returns the content (the LibTorch archive) or throws
// CheckpointError(name, the check that failed). seal_checkpoint is the inverse: header + content.
std::string unseal_checkpoint(const std::string& bytes, const std::string& name);
std::string seal_checkpoint(const std::string& content);

// The checkpoint to resume from, checked.
struct CheckpointChoice {
  std::string file;     // the file used: the checkpoint, or its previous one
  std::string bytes;    // its whole bytes (header included), checked
  std::string warning;  // empty, or one line: which file was bad (and why), which one is used
};

// Picks `path` when it passes its checks, else its previous one when that does: the bad one is
// then moved aside to <path>.bad (so the next save does not keep it as the previous one) and the
// warning says so. nullopt when neither file exists. Throws CheckpointError naming `path` and its
// failed check (and the previous one's) when no file passes.
std::optional<CheckpointChoice> choose_checkpoint(const std::string& path);

// Removes the temporary file a writer of `path` killed mid-write left (checkpoint_temp_path);
// returns the files removed. Call it at start, before any save. Throws CheckpointError when one
// exists but cannot be removed.
std::vector<std::string> remove_stale_temporaries(const std::string& path);

// The names a checkpoint at `path` uses next to it: the temporary file of a write in progress
// (<path>.tmp), the previous checkpoint (ck.pt -> ck.prev.pt; other names get ".prev" appended)
// and where a bad one is moved aside (<path>.bad).
std::string checkpoint_temp_path(const std::string& path);
std::string previous_checkpoint_path(const std::string& path);
std::string bad_checkpoint_path(const std::string& path);

}  // namespace ddl::mnist
