#include "examples/mnist/mnist_data.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace ddl::mnist {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    throw DataError(DataErrorKind::kMissingFile, path,
                    std::string("cannot open: ") + std::strerror(errno));
  }
  // One read into a buffer of the file's size (the training set is 47 MB: growing a vector
  // chunk by chunk would copy it several times); a file still growing is read to its end.
  struct stat st {};
  const std::size_t expected =
      ::fstat(::fileno(f.get()), &st) == 0 && st.st_size > 0 ? static_cast<std::size_t>(st.st_size)
                                                             : 0;
  std::vector<std::uint8_t> bytes(expected + 1);
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2 + (1 << 16));
    const std::size_t n = std::fread(bytes.data() + used, 1, bytes.size() - used, f.get());
    used += n;
    if (n == 0) {
      if (std::ferror(f.get())) {
        throw DataError(DataErrorKind::kReadFailed, path,
                        std::string("read failed after ") + std::to_string(used) +
                            " bytes: " + std::strerror(errno));
      }
      break;
    }
  }
  bytes.resize(used);
  return bytes;
}

bool has_gzip_magic(const std::vector<std::uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& in, const std::string& path) {
  z_stream zs{};
  // 16 + MAX_WBITS: a gzip wrapper is required (the caller saw its magic).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    throw DataError(DataErrorKind::kCorruptGzip, path, "zlib inflateInit2 failed");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, &inflateEnd);

  std::vector<std::uint8_t> out;
  out.resize(std::max<std::size_t>(in.size() * 4, 1 << 16));
  std::size_t in_pos = 0;
  std::size_t out_pos = 0;
  constexpr std::size_t kMaxChunk = 1u << 30;  // avail_in/avail_out are 32-bit
  for (;;) {
    if (out_pos == out.size()) out.resize(out.size() * 2);
    const std::size_t in_chunk = std::min(kMaxChunk, in.size() - in_pos);
    const std::size_t out_chunk = std::min(kMaxChunk, out.size() - out_pos);
    zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_chunk - zs.avail_in;
    out_pos += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (in_pos == in.size()) break;
      // Another gzip member may follow (as `cat a.gz b.gz` makes); anything else is garbage.
      if (in.size() - in_pos >= 2 && in[in_pos] == 0x1f && in[in_pos + 1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      throw DataError(DataErrorKind::kCorruptGzip, path,
                      "expected end of file or another gzip member after the stream, saw " +
                          std::to_string(in.size() - in_pos) + " trailing bytes");
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && in_pos == in.size()) {
      throw DataError(DataErrorKind::kCorruptGzip, path,
                      "gzip stream cut off: input ended after " + std::to_string(in.size()) +
                          " bytes before the end of the compressed data");
    }
    if (rc == Z_BUF_ERROR) continue;  // needs more output space: grown at the top
    throw DataError(DataErrorKind::kCorruptGzip, path,
                    std::string("undecodable gzip data at compressed byte ") +
                        std::to_string(in_pos) + ": " +
                        (zs.msg ? zs.msg : "zlib error " + std::to_string(rc)));
  }
  out.resize(out_pos);
  return out;
}

// A float tensor that takes over `values` without copying them.
torch::Tensor adopt(std::vector<float> values, std::vector<std::int64_t> sizes) {
  auto* owned = new std::vector<float>(std::move(values));
  return torch::from_blob(
      owned->data(), sizes, [owned](void*) { delete owned; }, torch::kFloat32);
}

// The bytes of `owner` from `offset` on as a uint8 tensor of `sizes`, owning the vector (no copy).
torch::Tensor adopt_bytes(std::vector<std::uint8_t> owner, std::size_t offset,
                          const std::vector<std::int64_t>& sizes) {
  auto* owned = new std::vector<std::uint8_t>(std::move(owner));
  return torch::from_blob(
      owned->data() + offset, sizes, [owned](void*) { delete owned; }, torch::kUInt8);
}

torch::Tensor adopt(std::vector<std::int64_t> values) {
  auto* owned = new std::vector<std::int64_t>(std::move(values));
  const auto n = static_cast<std::int64_t>(owned->size());
  return torch::from_blob(
      owned->data(), {n}, [owned](void*) { delete owned; }, torch::kInt64);
}

struct IdxHeader {
  std::uint32_t magic;
  std::vector<std::uint32_t> dims;
  std::size_t header_bytes;
};

IdxHeader read_idx_header(const std::vector<std::uint8_t>& bytes, std::uint32_t expected_magic,
                          const std::string& path) {
  if (bytes.size() < 4) {
    throw DataError(DataErrorKind::kTruncated, path,
                    "expected at least a 4-byte IDX magic number, file has " +
                        std::to_string(bytes.size()) + " bytes");
  }
  const std::uint32_t magic = read_be32(bytes.data());
  if (magic != expected_magic) {
    throw DataError(DataErrorKind::kBadMagic, path,
                    "expected IDX magic " + hex32(expected_magic) + ", saw " + hex32(magic));
  }
  const std::size_t ndims = magic & 0xff;
  const std::size_t header_bytes = 4 + 4 * ndims;
  if (bytes.size() < header_bytes) {
    throw DataError(DataErrorKind::kTruncated, path,
                    "expected a " + std::to_string(header_bytes) + "-byte IDX header, file has " +
                        std::to_string(bytes.size()) + " bytes");
  }
  IdxHeader h{magic, {}, header_bytes};
  for (std::size_t i = 0; i < ndims; ++i) h.dims.push_back(read_be32(bytes.data() + 4 + 4 * i));
  return h;
}

void check_payload_size(const std::vector<std::uint8_t>& bytes, const IdxHeader& h,
                        std::size_t expected_payload, const std::string& path) {
  const std::size_t seen = bytes.size() - h.header_bytes;
  if (seen != expected_payload) {
    throw DataError(DataErrorKind::kTruncated, path,
                    "header promises " + std::to_string(expected_payload) +
                        " data bytes, file has " + std::to_string(seen) +
                        (seen < expected_payload ? " (truncated)" : " (trailing bytes)"));
  }
}

// x / 255 * 2 - 1: the Paddle course's normalisation of a pixel byte.
inline float pixel_value(std::uint8_t x) { return static_cast<float>(x) / 255.0f * 2.0f - 1.0f; }

// --- The course's mnist.json.gz, parsed as a SAX stream ------------------------------------------
// Layout: [split, split, split], split = [images, labels], images = [[784 numbers], ...],
// labels = [integer, ...]. Depth counts the open arrays.
class SeedJsonReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  struct Split {
    std::vector<float> pixels;
    std::vector<std::int64_t> labels;
    std::int64_t images = 0;
    int parts = 0;  // how many of [images, labels] were seen
  };

  explicit SeedJsonReader(std::string path) : path_(std::move(path)) {}

  std::vector<Split>& splits() { return splits_; }
  const std::optional<DataError>& error() const { return error_; }

  bool null() override { return unexpected("null"); }
  bool boolean(bool) override { return unexpected("a boolean"); }
  bool string(string_t&) override { return unexpected("a string"); }
  bool binary(binary_t&) override { return unexpected("binary data"); }
  bool start_object(std::size_t) override { return unexpected("an object"); }
  bool key(string_t&) override { return unexpected("an object key"); }
  bool end_object() override { return unexpected("an object end"); }

  bool number_integer(number_integer_t v) override { return number(static_cast<double>(v), true); }
  bool number_unsigned(number_unsigned_t v) override {
    return number(static_cast<double>(v), true);
  }
  bool number_float(number_float_t v, const string_t&) override { return number(v, false); }

  bool start_array(std::size_t) override {
    switch (depth_) {
      case 0:  // the top-level [train, valid, eval]
        break;
      case 1:  // a split
        if (splits_.size() == 3) return fail("expected 3 splits [train, valid, eval], saw more");
        splits_.emplace_back();
        break;
      case 2:  // images or labels of the current split
        if (splits_.back().parts == 2) {
          return fail(where() + ": expected [images, labels], saw a third element");
        }
        break;
      case 3:  // one image, inside the images list only
        if (splits_.back().parts != 0) {
          return fail(where() + ": expected integer labels, saw a list");
        }
        pixels_in_image_ = 0;
        break;
      default:
        return fail(where() + ": expected numbers, saw a list nested too deep");
    }
    ++depth_;
    return true;
  }

  bool end_array() override {
    --depth_;
    switch (depth_) {
      case 0:
        if (splits_.size() != 3) {
          return fail("expected 3 splits [train, valid, eval], saw " +
                      std::to_string(splits_.size()));
        }
        break;
      case 1: {
        Split& s = splits_.back();
        if (s.parts != 2) {
          return fail(where() + ": expected [images, labels], saw " + std::to_string(s.parts) +
                      " element(s)");
        }
        if (s.images != static_cast<std::int64_t>(s.labels.size())) {
          return fail(DataErrorKind::kCountMismatch,
                      where() + ": " + std::to_string(s.images) + " images but " +
                          std::to_string(s.labels.size()) + " labels");
        }
        break;
      }
      case 2:
        ++splits_.back().parts;
        break;
      case 3:
        if (pixels_in_image_ != kPixels) {
          return fail(DataErrorKind::kBadShape,
                      where() + " image " + std::to_string(splits_.back().images) + ": expected " +
                          std::to_string(kPixels) + " values, saw " +
                          std::to_string(pixels_in_image_));
        }
        ++splits_.back().images;
        break;
      default:
        break;
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    return fail(DataErrorKind::kMalformedJson,
                "not valid JSON at byte " + std::to_string(position) + ": " + ex.what());
  }

 private:
  bool number(double v, bool is_integer) {
    if (depth_ == 4) {
      if (++pixels_in_image_ > kPixels) return true;  // reported once, at the image's end
      splits_.back().pixels.push_back(static_cast<float>(v));
      return true;
    }
    if (depth_ == 3 && splits_.back().parts == 1) {
      if (!is_integer && v != static_cast<double>(static_cast<std::int64_t>(v))) {
        return fail(DataErrorKind::kBadLabel,
                    where() + ": expected an integer label, saw " + std::to_string(v));
      }
      const auto label = static_cast<std::int64_t>(v);
      if (label < 0 || label >= kClasses) {
        return fail(DataErrorKind::kBadLabel, where() + " label " +
                                                  std::to_string(splits_.back().labels.size()) +
                                                  ": expected 0..9, saw " + std::to_string(label));
      }
      splits_.back().labels.push_back(label);
      return true;
    }
    return unexpected("a number");
  }

  std::string where() const {
    static const char* const kNames[] = {"train", "valid", "eval"};
    if (splits_.empty()) return "top level";
    std::string s = kNames[splits_.size() - 1];
    if (depth_ >= 2 && splits_.back().parts < 2) {
      s += splits_.back().parts == 0 ? " images" : " labels";
    }
    return s;
  }

  bool unexpected(const std::string& what) {
    return fail(where() + ": expected the layout [[images, labels] x 3], saw " + what);
  }
  bool fail(const std::string& detail) { return fail(DataErrorKind::kMalformedJson, detail); }
  bool fail(DataErrorKind kind, const std::string& detail) {
    if (!error_) error_.emplace(kind, path_, detail);
    return false;
  }

  std::string path_;
  std::vector<Split> splits_;
  int depth_ = 0;
  std::int64_t pixels_in_image_ = 0;
  std::optional<DataError> error_;
};

Dataset to_dataset(SeedJsonReader::Split&& s) {
  Dataset d;
  d.images = adopt(std::move(s.pixels), {s.images, 1, kRows, kCols});
  d.labels = adopt(std::move(s.labels));
  return d;
}

std::string find_idx(const fs::path& dir, const std::string& name) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    std::error_code ec;
    if (fs::is_regular_file(dir / candidate, ec)) return (dir / candidate).string();
  }
  throw DataError(DataErrorKind::kMissingFile, (dir / name).string(),
                  "expected " + name + " or " + name +
                      ".gz in this folder (scripts/fetch_mnist.sh fetches them)");
}

}  // namespace

const char* to_string(DataErrorKind kind) {
  switch (kind) {
    case DataErrorKind::kMissingFile:
      return "missing file";
    case DataErrorKind::kReadFailed:
      return "read failed";
    case DataErrorKind::kBadMagic:
      return "wrong magic";
    case DataErrorKind::kBadShape:
      return "wrong shape";
    case DataErrorKind::kTruncated:
      return "wrong size";
    case DataErrorKind::kCountMismatch:
      return "count mismatch";
    case DataErrorKind::kBadLabel:
      return "bad label";
    case DataErrorKind::kMalformedJson:
      return "malformed JSON";
    case DataErrorKind::kCorruptGzip:
      return "corrupt gzip";
  }
  return "data error";
}

DataError::DataError(DataErrorKind kind, std::string file, const std::string& detail)
    : Error(kExitBadData, "",
            "MNIST data error (" + std::string(to_string(kind)) + ") in '" + file + "': " + detail),
      kind_(kind),
      file_(std::move(file)) {}

Dataset Dataset::to(const torch::Device& device) const {
  return Dataset{images.to(device), labels.to(device),
                 pixel_values.defined() ? pixel_values.to(device) : torch::Tensor()};
}

torch::Tensor pixel_table() {
  torch::Tensor t = torch::empty({256}, torch::kFloat32);
  float* v = t.data_ptr<float>();
  for (int x = 0; x < 256; ++x) v[x] = pixel_value(static_cast<std::uint8_t>(x));
  return t;
}

torch::Tensor normalised(const torch::Tensor& images, const torch::Tensor& table) {
  if (images.scalar_type() != torch::kUInt8) return images;
  // Looked up, not computed: the same float for a byte as pixel_value() gives (torch divides
  // by a scalar through its reciprocal on some devices, one ulp off).
  const torch::Tensor lut = table.defined() && table.device() == images.device()
                                ? table
                                : pixel_table().to(images.device());
  return lut.index_select(0, images.flatten().to(torch::kInt64)).view(images.sizes());
}

torch::Tensor Dataset::batch(const torch::Tensor& index) const {
  return normalised(images.index_select(0, index), pixel_values);
}

torch::Tensor Dataset::rows(std::int64_t start, std::int64_t count) const {
  return normalised(images.narrow(0, start, count), pixel_values).contiguous();
}

Dataset Dataset::slice(std::int64_t start, std::int64_t count) const {
  if (start < 0 || count < 0 || start + count > size()) {
    throw std::out_of_range("mnist: slice [" + std::to_string(start) + ", " +
                            std::to_string(start + count) + ") of a dataset of " +
                            std::to_string(size()) + " samples");
  }
  return Dataset{images.narrow(0, start, count), labels.narrow(0, start, count), pixel_values};
}

std::vector<std::uint8_t> read_maybe_gzip(const std::string& path) {
  std::vector<std::uint8_t> bytes = read_file(path);
  if (has_gzip_magic(bytes)) return gunzip(bytes, path);
  return bytes;
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  std::vector<std::uint8_t> image_bytes = read_maybe_gzip(images_path);
  const IdxHeader ih = read_idx_header(image_bytes, kImagesMagic, images_path);
  const std::int64_t n = ih.dims[0];
  if (ih.dims[1] != kRows || ih.dims[2] != kCols) {
    throw DataError(DataErrorKind::kBadShape, images_path,
                    "expected 28x28 images, header says " + std::to_string(ih.dims[1]) + "x" +
                        std::to_string(ih.dims[2]));
  }
  check_payload_size(image_bytes, ih, static_cast<std::size_t>(n * kPixels), images_path);

  const std::vector<std::uint8_t> label_bytes = read_maybe_gzip(labels_path);
  const IdxHeader lh = read_idx_header(label_bytes, kLabelsMagic, labels_path);
  const std::int64_t n_labels = lh.dims[0];
  check_payload_size(label_bytes, lh, static_cast<std::size_t>(n_labels), labels_path);
  if (n != n_labels) {
    throw DataError(DataErrorKind::kCountMismatch, labels_path,
                    "expected " + std::to_string(n) + " labels (the image count of '" +
                        images_path + "'), header says " + std::to_string(n_labels));
  }

  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t label = label_bytes[lh.header_bytes + static_cast<std::size_t>(i)];
    if (label >= kClasses) {
      throw DataError(
          DataErrorKind::kBadLabel, labels_path,
          "label " + std::to_string(i) + ": expected 0..9, saw " + std::to_string(label));
    }
    labels[static_cast<std::size_t>(i)] = label;
  }
  // The pixels stay in the file's buffer, after its header: normalised batch by batch.
  return Dataset{adopt_bytes(std::move(image_bytes), ih.header_bytes, {n, 1, kRows, kCols}),
                 adopt(std::move(labels)), pixel_table()};
}

MnistData load_idx_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw DataError(DataErrorKind::kMissingFile, dir,
                    "expected a folder with the MNIST IDX files (scripts/fetch_mnist.sh fetches "
                    "them)");
  }
  MnistData data;
  data.train =
      load_idx(find_idx(dir, "train-images-idx3-ubyte"), find_idx(dir, "train-labels-idx1-ubyte"));
  data.test =
      load_idx(find_idx(dir, "t10k-images-idx3-ubyte"), find_idx(dir, "t10k-labels-idx1-ubyte"));
  data.source = "IDX files in " + dir;
  return data;
}

MnistData load_json(const std::string& path) {
  std::vector<std::uint8_t> text = read_maybe_gzip(path);
  SeedJsonReader reader(path);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
  text = {};
  if (reader.error()) throw *reader.error();
  if (!ok) throw DataError(DataErrorKind::kMalformedJson, path, "JSON parser stopped early");
  auto& splits = reader.splits();
  MnistData data;
  data.train = to_dataset(std::move(splits[0]));
  data.valid = to_dataset(std::move(splits[1]));
  data.test = to_dataset(std::move(splits[2]));
  data.source = "MNIST JSON " + path;
  return data;
}

MnistData load(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return load_idx_dir(path);
  if (fs::exists(st)) return load_json(path);
  throw DataError(DataErrorKind::kMissingFile, path,
                  "expected a folder of MNIST IDX files or a mnist.json.gz file: no such path");
}

}  // namespace ddl::mnist
