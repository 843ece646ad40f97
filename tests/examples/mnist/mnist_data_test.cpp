// The MNIST loaders on small files this test writes: IDX raw and gzip, the course's JSON, and each
// kind of bad data.
#include "examples/mnist/mnist_data.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace ddl::mnist {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

using ddl::testing::TempDir;

void put_be32(Bytes& b, std::uint32_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 24));
  b.push_back(static_cast<std::uint8_t>(v >> 16));
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}

std::uint8_t pixel(std::int64_t image, std::int64_t i) {
  return static_cast<std::uint8_t>((image * 31 + i * 7) % 256);
}

Bytes idx_images(std::uint32_t n, std::uint32_t rows = 28, std::uint32_t cols = 28,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t k = 0; k < n; ++k) {
    for (std::uint32_t i = 0; i < rows * cols; ++i) b.push_back(pixel(k, i));
  }
  return b;
}

Bytes idx_labels(std::uint32_t n, std::uint32_t magic = 0x00000801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  for (std::uint32_t k = 0; k < n; ++k) b.push_back(static_cast<std::uint8_t>((k * 3) % 10));
  return b;
}

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_raw(const std::string& path, const std::string& text) {
  write_raw(path, Bytes(text.begin(), text.end()));
}

Bytes gzip_bytes(const Bytes& bytes) {
  z_stream zs{};
  EXPECT_EQ(
      deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
      Z_OK);
  Bytes out(deflateBound(&zs, static_cast<uLong>(bytes.size())) + 64);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

Bytes gzip_bytes(const std::string& text) { return gzip_bytes(Bytes(text.begin(), text.end())); }

// The course's JSON layout, with `sizes` images per split; pixel values k/10 - 1 style floats.
std::string seed_json(const std::vector<int>& sizes, int values_per_image = 784,
                      int extra_labels = 0, int bad_label = -1) {
  std::ostringstream s;
  s << "[";
  for (std::size_t split = 0; split < sizes.size(); ++split) {
    if (split) s << ",";
    s << "[[";
    for (int k = 0; k < sizes[split]; ++k) {
      if (k) s << ",";
      s << "[";
      for (int i = 0; i < values_per_image; ++i) {
        if (i) s << ",";
        s << (i % 3 == 0 ? "-1" : (i % 3 == 1 ? "0.5" : "1.0"));
      }
      s << "]";
    }
    s << "],[";
    for (int k = 0; k < sizes[split] + extra_labels; ++k) {
      if (k) s << ",";
      s << (bad_label >= 0 && k == 0 ? bad_label : (k + static_cast<int>(split)) % 10);
    }
    s << "]]";
  }
  s << "]";
  return s.str();
}

template <typename F>
DataError expect_data_error(F&& f, DataErrorKind kind) {
  try {
    f();
  } catch (const DataError& e) {
    EXPECT_EQ(e.kind(), kind) << "message: " << e.what();
    return e;
  }
  ADD_FAILURE() << "expected a DataError (" << to_string(kind) << ")";
  return DataError(kind, "", "not thrown");
}

// --- IDX -----------------------------------------------------------------------------------------

TEST(MnistIdx, RawFilesLoadIntoOneContiguousTensorWithSeedNormalisation) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(3));
  write_raw(dir.file("lbl"), idx_labels(3));
  const Dataset d = load_idx(dir.file("img"), dir.file("lbl"));
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(d.images.sizes(), (std::vector<std::int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(d.images.scalar_type(), torch::kUInt8) << "the file's bytes, normalised on use";
  EXPECT_TRUE(d.images.is_contiguous());
  EXPECT_EQ(d.labels.scalar_type(), torch::kInt64);
  EXPECT_EQ(d.labels.sizes(), (std::vector<std::int64_t>{3}));
  const torch::Tensor all = d.rows(0, 3);
  EXPECT_EQ(all.scalar_type(), torch::kFloat32);
  EXPECT_EQ(all.sizes(), (std::vector<std::int64_t>{3, 1, 28, 28}));
  ASSERT_TRUE(all.is_contiguous());
  const float* px = all.data_ptr<float>();
  const std::uint8_t* bytes = d.images.data_ptr<std::uint8_t>();
  for (std::int64_t k = 0; k < 3; ++k) {
    for (std::int64_t i = 0; i < 784; ++i) {
      EXPECT_EQ(bytes[k * 784 + i], pixel(k, i));
      // Bit for bit the course's expression, not merely close to it.
      const float expected = static_cast<float>(pixel(k, i)) / 255.0f * 2.0f - 1.0f;
      ASSERT_EQ(std::memcmp(&px[k * 784 + i], &expected, sizeof(float)), 0) << k << "," << i;
    }
    EXPECT_EQ(d.labels[k].item<std::int64_t>(), (k * 3) % 10);
  }
  EXPECT_GE(all.min().item<float>(), -1.0f);
  EXPECT_LE(all.max().item<float>(), 1.0f);
  // A batch by index gives those samples' rows, in the index's order.
  const torch::Tensor picked = d.batch(torch::tensor({2, 0}, torch::kInt64));
  EXPECT_TRUE(torch::equal(picked[0], all[2]));
  EXPECT_TRUE(torch::equal(picked[1], all[0]));
  // Float images (the JSON source, a test's data) pass through unchanged.
  const Dataset floats{all, d.labels};
  EXPECT_TRUE(torch::equal(floats.rows(0, 3), all));
  EXPECT_TRUE(torch::equal(floats.batch(torch::tensor({1}, torch::kInt64))[0], all[1]));
}

TEST(MnistIdx, SliceIsAViewOfConsecutiveSamplesAndChecksItsBounds) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(5));
  write_raw(dir.file("lbl"), idx_labels(5));
  const Dataset d = load_idx(dir.file("img"), dir.file("lbl"));
  const Dataset s = d.slice(1, 3);
  ASSERT_EQ(s.size(), 3);
  EXPECT_TRUE(torch::equal(s.images, d.images.narrow(0, 1, 3)));
  EXPECT_TRUE(torch::equal(s.labels, d.labels.narrow(0, 1, 3)));
  EXPECT_EQ(s.images.data_ptr(), d.images[1].data_ptr());  // a view, not a copy
  EXPECT_EQ(d.slice(5, 0).size(), 0);
  EXPECT_THROW(d.slice(4, 2), std::out_of_range);
  EXPECT_THROW(d.slice(-1, 1), std::out_of_range);
}

TEST(MnistIdx, ExtremePixelsMapToMinusOneAndOne) {
  TempDir dir;
  Bytes img = idx_images(1);
  img[16] = 0;
  img[17] = 255;
  write_raw(dir.file("img"), img);
  write_raw(dir.file("lbl"), idx_labels(1));
  const Dataset d = load_idx(dir.file("img"), dir.file("lbl"));
  EXPECT_FLOAT_EQ(d.rows(0, 1).flatten()[0].item<float>(), -1.0f);
  EXPECT_FLOAT_EQ(d.rows(0, 1).flatten()[1].item<float>(), 1.0f);
}

TEST(MnistIdx, GzipFilesGiveTheSameTensorsAsRaw) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(4));
  write_raw(dir.file("lbl"), idx_labels(4));
  // No .gz suffix on purpose: gzip is detected by its magic bytes.
  write_raw(dir.file("img_gz"), gzip_bytes(idx_images(4)));
  write_raw(dir.file("lbl_gz"), gzip_bytes(idx_labels(4)));
  const Dataset raw = load_idx(dir.file("img"), dir.file("lbl"));
  const Dataset gz = load_idx(dir.file("img_gz"), dir.file("lbl_gz"));
  EXPECT_TRUE(torch::equal(raw.images, gz.images));
  EXPECT_TRUE(torch::equal(raw.labels, gz.labels));
}

TEST(MnistIdx, ConcatenatedGzipMembersAreOneStream) {
  TempDir dir;
  const Bytes whole = idx_labels(6);
  const Bytes first(whole.begin(), whole.begin() + 9);
  const Bytes second(whole.begin() + 9, whole.end());
  Bytes joined = gzip_bytes(first);
  const Bytes tail = gzip_bytes(second);
  joined.insert(joined.end(), tail.begin(), tail.end());
  write_raw(dir.file("lbl.gz"), joined);
  EXPECT_EQ(read_maybe_gzip(dir.file("lbl.gz")), whole);
}

TEST(MnistIdx, FolderWithPlainAndGzipNames) {
  TempDir dir;
  write_raw(dir.file("train-images-idx3-ubyte"), idx_images(5));
  write_raw(dir.file("train-labels-idx1-ubyte"), idx_labels(5));
  write_raw(dir.file("t10k-images-idx3-ubyte.gz"), gzip_bytes(idx_images(2)));
  write_raw(dir.file("t10k-labels-idx1-ubyte.gz"), gzip_bytes(idx_labels(2)));
  const MnistData data = load(dir.str());
  EXPECT_EQ(data.train.size(), 5);
  EXPECT_EQ(data.test.size(), 2);
  EXPECT_EQ(data.valid.size(), 0);
}

TEST(MnistIdxErrors, MissingFile) {
  TempDir dir;
  write_raw(dir.file("lbl"), idx_labels(1));
  const DataError e = expect_data_error([&] { load_idx(dir.file("nope"), dir.file("lbl")); },
                                        DataErrorKind::kMissingFile);
  EXPECT_EQ(e.file(), dir.file("nope"));
  EXPECT_NE(std::string(e.what()).find(dir.file("nope")), std::string::npos) << e.what();
}

TEST(MnistIdxErrors, FolderWithoutTheFilesNamesTheMissingOne) {
  TempDir dir;
  write_raw(dir.file("train-images-idx3-ubyte"), idx_images(1));
  const DataError e = expect_data_error([&] { load(dir.str()); }, DataErrorKind::kMissingFile);
  EXPECT_NE(std::string(e.what()).find("train-labels-idx1-ubyte"), std::string::npos) << e.what();
}

TEST(MnistIdxErrors, PathThatDoesNotExist) {
  TempDir dir;
  expect_data_error([&] { load(dir.file("no/such/path")); }, DataErrorKind::kMissingFile);
}

TEST(MnistIdxErrors, WrongMagicSaysExpectedAndSeen) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(2, 28, 28, /*magic=*/0x00000801));
  write_raw(dir.file("lbl"), idx_labels(2));
  const DataError e = expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); },
                                        DataErrorKind::kBadMagic);
  EXPECT_EQ(e.file(), dir.file("img"));
  const std::string msg = e.what();
  EXPECT_NE(msg.find("0x00000803"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000801"), std::string::npos) << msg;
}

TEST(MnistIdxErrors, LabelFileWithImageMagic) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(2));
  write_raw(dir.file("lbl"), idx_images(2));
  const DataError e = expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); },
                                        DataErrorKind::kBadMagic);
  EXPECT_EQ(e.file(), dir.file("lbl"));
}

TEST(MnistIdxErrors, TruncatedImagesSaysPromisedAndSeenBytes) {
  TempDir dir;
  Bytes img = idx_images(3);
  img.resize(img.size() - 10);
  write_raw(dir.file("img"), img);
  write_raw(dir.file("lbl"), idx_labels(3));
  const DataError e = expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); },
                                        DataErrorKind::kTruncated);
  const std::string msg = e.what();
  EXPECT_NE(msg.find(std::to_string(3 * 784)), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(3 * 784 - 10)), std::string::npos) << msg;
}

TEST(MnistIdxErrors, TruncatedHeaderAndLabels) {
  TempDir dir;
  write_raw(dir.file("short"), Bytes{0, 0, 8});
  write_raw(dir.file("half_header"), Bytes{0, 0, 8, 3, 0, 0, 0, 1});
  Bytes lbl = idx_labels(3);
  lbl.pop_back();
  write_raw(dir.file("lbl_cut"), lbl);
  write_raw(dir.file("img"), idx_images(3));
  expect_data_error([&] { load_idx(dir.file("short"), dir.file("lbl_cut")); },
                    DataErrorKind::kTruncated);
  expect_data_error([&] { load_idx(dir.file("half_header"), dir.file("lbl_cut")); },
                    DataErrorKind::kTruncated);
  expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl_cut")); },
                    DataErrorKind::kTruncated);
}

TEST(MnistIdxErrors, TrailingBytes) {
  TempDir dir;
  Bytes img = idx_images(1);
  img.push_back(0);
  write_raw(dir.file("img"), img);
  write_raw(dir.file("lbl"), idx_labels(1));
  expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); }, DataErrorKind::kTruncated);
}

TEST(MnistIdxErrors, ImageAndLabelCountsDiffer) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(3));
  write_raw(dir.file("lbl"), idx_labels(2));
  const DataError e = expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); },
                                        DataErrorKind::kCountMismatch);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("expected 3 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("says 2"), std::string::npos) << msg;
}

TEST(MnistIdxErrors, ImagesThatAreNot28x28) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(1, 27, 28));
  write_raw(dir.file("lbl"), idx_labels(1));
  expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); }, DataErrorKind::kBadShape);
}

TEST(MnistIdxErrors, LabelOutOfRange) {
  TempDir dir;
  Bytes lbl = idx_labels(2);
  lbl.back() = 10;
  write_raw(dir.file("img"), idx_images(2));
  write_raw(dir.file("lbl"), lbl);
  expect_data_error([&] { load_idx(dir.file("img"), dir.file("lbl")); }, DataErrorKind::kBadLabel);
}

TEST(MnistIdxErrors, CorruptGzipPayload) {
  TempDir dir;
  Bytes gz = gzip_bytes(idx_images(3));
  gz[gz.size() / 2] ^= 0xff;
  gz[gz.size() / 2 + 1] ^= 0x55;
  write_raw(dir.file("img.gz"), gz);
  write_raw(dir.file("lbl"), idx_labels(3));
  const DataError e = expect_data_error([&] { load_idx(dir.file("img.gz"), dir.file("lbl")); },
                                        DataErrorKind::kCorruptGzip);
  EXPECT_EQ(e.file(), dir.file("img.gz"));
}

TEST(MnistIdxErrors, CutOffGzip) {
  TempDir dir;
  Bytes gz = gzip_bytes(idx_images(3));
  gz.resize(gz.size() / 2);
  write_raw(dir.file("img.gz"), gz);
  write_raw(dir.file("lbl"), idx_labels(3));
  const DataError e = expect_data_error([&] { load_idx(dir.file("img.gz"), dir.file("lbl")); },
                                        DataErrorKind::kCorruptGzip);
  EXPECT_NE(std::string(e.what()).find("cut off"), std::string::npos) << e.what();
}

TEST(MnistIdxErrors, GarbageAfterGzipStream) {
  TempDir dir;
  Bytes gz = gzip_bytes(idx_labels(2));
  gz.push_back('x');
  gz.push_back('y');
  write_raw(dir.file("lbl.gz"), gz);
  expect_data_error([&] { read_maybe_gzip(dir.file("lbl.gz")); }, DataErrorKind::kCorruptGzip);
}

// --- The course's JSON --------------------------------------------------------------------------

TEST(MnistJson, GzipJsonLoadsTheThreeSplits) {
  TempDir dir;
  write_raw(dir.file("mnist.json.gz"), gzip_bytes(seed_json({2, 1, 3})));
  const MnistData data = load(dir.file("mnist.json.gz"));
  EXPECT_EQ(data.train.size(), 2);
  EXPECT_EQ(data.valid.size(), 1);
  EXPECT_EQ(data.test.size(), 3);
  EXPECT_EQ(data.train.images.sizes(), (std::vector<std::int64_t>{2, 1, 28, 28}));
  EXPECT_TRUE(data.train.images.is_contiguous());
  EXPECT_EQ(data.test.labels.scalar_type(), torch::kInt64);
  const auto flat = data.train.images.flatten();
  EXPECT_FLOAT_EQ(flat[0].item<float>(), -1.0f);
  EXPECT_FLOAT_EQ(flat[1].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(flat[2].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(flat[784 + 1].item<float>(), 0.5f);
  EXPECT_EQ(data.test.labels[2].item<std::int64_t>(), 4);  // (k + split) % 10 with k=2, split=2
}

TEST(MnistJson, PlainJsonWorksToo) {
  TempDir dir;
  write_raw(dir.file("mnist.json"), seed_json({1, 1, 1}));
  const MnistData data = load_json(dir.file("mnist.json"));
  EXPECT_EQ(data.train.size(), 1);
}

TEST(MnistJsonErrors, MalformedJson) {
  TempDir dir;
  std::string text = seed_json({1, 1, 1});
  text.resize(text.size() / 2);
  write_raw(dir.file("cut.json.gz"), gzip_bytes(text));
  const DataError e =
      expect_data_error([&] { load(dir.file("cut.json.gz")); }, DataErrorKind::kMalformedJson);
  EXPECT_EQ(e.file(), dir.file("cut.json.gz"));
  write_raw(dir.file("junk.json"), std::string("this is not json"));
  expect_data_error([&] { load(dir.file("junk.json")); }, DataErrorKind::kMalformedJson);
  write_raw(dir.file("empty.json"), std::string());
  expect_data_error([&] { load(dir.file("empty.json")); }, DataErrorKind::kMalformedJson);
}

TEST(MnistJsonErrors, ValidJsonWithTheWrongLayout) {
  TempDir dir;
  const std::vector<std::string> bad = {
      R"({"train": []})",                    // an object
      "[]",                                  // no splits
      seed_json({1, 1}),                     // two splits
      seed_json({1, 1, 1, 1}),               // four splits
      R"([[[["a"]],[1]],[[],[]],[[],[]]])",  // a string pixel
      R"([[[1,2],[1]],[[],[]],[[],[]]])",    // images not nested
      R"([[[],[],[]],[[],[]],[[],[]]])",     // three parts in a split
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    const std::string path = dir.file("bad" + std::to_string(i) + ".json");
    write_raw(path, bad[i]);
    expect_data_error([&] { load_json(path); }, DataErrorKind::kMalformedJson);
  }
}

TEST(MnistJsonErrors, ImageWithoutSevenHundredEightyFourValues) {
  TempDir dir;
  write_raw(dir.file("short.json"), seed_json({1, 1, 1}, 783));
  const DataError e =
      expect_data_error([&] { load_json(dir.file("short.json")); }, DataErrorKind::kBadShape);
  EXPECT_NE(std::string(e.what()).find("saw 783"), std::string::npos) << e.what();
  write_raw(dir.file("long.json"), seed_json({1, 1, 1}, 785));
  expect_data_error([&] { load_json(dir.file("long.json")); }, DataErrorKind::kBadShape);
}

TEST(MnistJsonErrors, ImageAndLabelCountsDiffer) {
  TempDir dir;
  write_raw(dir.file("m.json.gz"), gzip_bytes(seed_json({2, 1, 1}, 784, /*extra_labels=*/1)));
  const DataError e =
      expect_data_error([&] { load(dir.file("m.json.gz")); }, DataErrorKind::kCountMismatch);
  EXPECT_NE(std::string(e.what()).find("2 images but 3 labels"), std::string::npos) << e.what();
}

TEST(MnistJsonErrors, LabelOutOfRange) {
  TempDir dir;
  write_raw(dir.file("m.json"), seed_json({1, 1, 1}, 784, 0, /*bad_label=*/12));
  expect_data_error([&] { load(dir.file("m.json")); }, DataErrorKind::kBadLabel);
}

TEST(MnistJsonErrors, CorruptGzip) {
  TempDir dir;
  Bytes gz = gzip_bytes(seed_json({1, 1, 1}));
  for (std::size_t i = 20; i < 40; ++i) gz[i] ^= 0xa5;
  write_raw(dir.file("m.json.gz"), gz);
  expect_data_error([&] { load(dir.file("m.json.gz")); }, DataErrorKind::kCorruptGzip);
}

TEST(MnistData, MoveToDeviceKeepsContents) {
  TempDir dir;
  write_raw(dir.file("img"), idx_images(2));
  write_raw(dir.file("lbl"), idx_labels(2));
  const Dataset d = load_idx(dir.file("img"), dir.file("lbl"));
  const Dataset moved = d.to(torch::kCPU);
  EXPECT_TRUE(torch::equal(moved.images, d.images));
  EXPECT_TRUE(torch::equal(moved.rows(0, 2), d.rows(0, 2)));
  // Batches are gathered from the one tensor by index.
  const auto batch = d.batch(torch::tensor({1, 0}, torch::kInt64));
  EXPECT_TRUE(torch::equal(batch[0], d.rows(1, 1)[0]));
}

// The fetched real data, when scripts/fetch_mnist.sh has run.
TEST(MnistRealData, FetchedIdxFolderHasTheOriginalSplits) {
  const std::string dir = std::string(DDL_SOURCE_DIR) + "/data/mnist";
  if (!fs::exists(dir + "/train-images-idx3-ubyte")) {
    GTEST_SKIP() << dir << " is missing: run scripts/fetch_mnist.sh first";
  }
  const MnistData data = load(dir);
  EXPECT_EQ(data.train.size(), 60000);
  EXPECT_EQ(data.test.size(), 10000);
  EXPECT_EQ(data.train.labels[0].item<std::int64_t>(), 5);
  EXPECT_EQ(data.test.labels[0].item<std::int64_t>(), 7);
  EXPECT_EQ(data.train.labels.eq(1).sum().item<std::int64_t>(), 6742);
  EXPECT_EQ(data.train.images.min().item<int>(), 0);
  EXPECT_EQ(data.train.images.max().item<int>(), 255);
  EXPECT_FLOAT_EQ(data.train.rows(0, 1000).min().item<float>(), -1.0f);
  EXPECT_FLOAT_EQ(data.train.rows(0, 1000).max().item<float>(), 1.0f);
}

}  // namespace
}  // namespace ddl::mnist
