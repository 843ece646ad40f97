// MNIST loaders: the original IDX files (raw or gzip) and the Paddle course's `mnist.json.gz`.
//
// Every loader returns the whole split as ONE contiguous tensor [N, 1, 28, 28] plus an int64 label
// tensor [N]; training gathers batches from it by index (batch()), never per sample. Pixels come
// out of batch()/rows() in the course's normalisation: IDX bytes x become x / 255 * 2 - 1, so both
// sources give float32 values in [-1, 1]; the JSON's floats are taken as they are. The IDX
// pixels stay bytes in memory (47 MB for the training set, not 188 MB of floats) and are
// normalised batch by batch: loading them is one read of each file.
//
// Bad data throws DataError naming the file and saying what was expected and what was seen.
// Gzip is recognised by its magic bytes (1f 8b), not by the file name.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/error.h"

namespace ddl::mnist {

inline constexpr std::int64_t kRows = 28;
inline constexpr std::int64_t kCols = 28;
inline constexpr std::int64_t kPixels = kRows * kCols;
inline constexpr std::int64_t kClasses = 10;

// The kinds of bad data, so callers and tests can tell them apart without parsing messages.
enum class DataErrorKind {
  kMissingFile,    // the file (or folder) does not exist or cannot be opened
  kReadFailed,     // an I/O error while reading
  kBadMagic,       // an IDX file whose magic number is not the expected one
  kBadShape,       // an IDX image size other than 28x28, a JSON image without 784 values
  kTruncated,      // fewer bytes than the header promises (or trailing bytes after the data)
  kCountMismatch,  // image and label counts differ
  kBadLabel,       // a label outside 0..9
  kMalformedJson,  // not JSON, or JSON without the course's [train, valid, eval] layout
  kCorruptGzip,    // gzip magic but an undecodable or cut-off stream
};

const char* to_string(DataErrorKind kind);

// A program ends with kExitBadData for it.
class DataError : public Error {
 public:
  DataError(DataErrorKind kind, std::string file, const std::string& detail);
  DataErrorKind kind() const { return kind_; }
  const std::string& file() const { return file_; }

 private:
  DataErrorKind kind_;
  std::string file_;
};

// One split: images [N, 1, 28, 28] (contiguous), labels [N] int64. `images` is either float32,
// already normalised (the JSON source, or data a test makes), or uint8 pixel bytes as the IDX
// files hold them; batch() and rows() give float32 either way.
struct Dataset {
  torch::Tensor images;
  torch::Tensor labels;
  // For uint8 images: pixel_table() on their device, made once by the IDX loader and moved by
  // to(), so a batch neither rebuilds it nor copies it from the host. Undefined for float images
  // (a uint8 dataset built without it gets a fresh table per batch).
  torch::Tensor pixel_values{};

  std::int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  // The normalised float32 images of the samples at `index` (int64, on the images' device).
  torch::Tensor batch(const torch::Tensor& index) const;
  // The normalised float32 images of samples [start, start + count).
  torch::Tensor rows(std::int64_t start, std::int64_t count) const;
  // Moves both tensors to `device` (once; the trainer keeps the whole set on the GPU).
  Dataset to(const torch::Device& device) const;
  // Samples [start, start + count) as views (no copy); throws std::out_of_range past the end.
  Dataset slice(std::int64_t start, std::int64_t count) const;
};

struct MnistData {
  Dataset train;       // IDX: the 60,000 training images; JSON: the course's train split
  Dataset valid;       // JSON only (the course's valid split); empty for IDX
  Dataset test;        // IDX: the 10,000 t10k images; JSON: the course's eval split
  std::string source;  // what was loaded, for log lines
};

// Float32 pixels of `images`: uint8 bytes x become x / 255 * 2 - 1 (bit for bit the value the
// scalar expression gives), float32 is returned as it is.
// `table`, when defined, is pixel_table() on the images' device.
torch::Tensor normalised(const torch::Tensor& images, const torch::Tensor& table = {});

// The 256 normalised pixel values, float32 on the CPU.
torch::Tensor pixel_table();

// The bytes of `path`, gunzipped when the file starts with the gzip magic (concatenated members
// included). Throws DataError (kMissingFile, kReadFailed, kCorruptGzip).
std::vector<std::uint8_t> read_maybe_gzip(const std::string& path);

// Pixels and labels from IDX images (magic 0x00000803, 28x28) and labels (magic 0x00000801).
Dataset load_idx(const std::string& images_path, const std::string& labels_path);

// The IDX files in `dir`: train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
// and t10k-labels-idx1-ubyte, each optionally with a `.gz` suffix (the plain name wins).
MnistData load_idx_dir(const std::string& dir);

// The course's mnist.json.gz (or plain .json):
// [[train_images, train_labels], [valid...], [eval...]].
// Parsed as a stream straight into the tensors (no JSON document is built in memory).
MnistData load_json(const std::string& path);

// A folder: load_idx_dir; a file: load_json. Throws DataError (kMissingFile when neither).
MnistData load(const std::string& path);

}  // namespace ddl::mnist
