// The report page in a real browser: headless Chromium renders the synthetic job's report.html
// (2 ranks, 3 epochs, 2 generations) to a screenshot and dumps the DOM it built. The screenshot
// must be the window's size and show the charts' colours; the DOM must hold both ranks' curves
// and the process table. Skipped when no chromium is on PATH (scripts/setup.sh installs it).
//
// DDL_REPORT_SCREENSHOT=<file> keeps a copy of the screenshot, to look at.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/report/run_report.h"
#include "tests/launcher/report/synthetic_job.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

extern char** environ;

namespace ddl::launcher {
namespace {

using testing::contains;
using testing::count;
using testing::read_file;
using testing::TempDir;

constexpr int kWidth = 1200;
constexpr int kHeight = 1600;
constexpr std::chrono::seconds kBrowserTimeout{60};

std::optional<std::string> find_on_path(const std::vector<std::string>& names) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    for (const std::string& name : names) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return std::nullopt;
}

// --- a PNG reader, just enough for a browser's screenshot (8-bit RGB or RGBA) -----------------

struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;  // rows of width * channels bytes
  std::string error;                 // why it could not be decoded
};

std::uint32_t be32(const std::string& s, std::size_t at) {
  return (std::uint32_t(std::uint8_t(s[at])) << 24) |
         (std::uint32_t(std::uint8_t(s[at + 1])) << 16) |
         (std::uint32_t(std::uint8_t(s[at + 2])) << 8) | std::uint32_t(std::uint8_t(s[at + 3]));
}

int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

Image decode_png(const std::string& file) {
  Image img;
  if (file.size() < 33 || file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    img.error = "not a PNG (" + std::to_string(file.size()) + " bytes)";
    return img;
  }
  std::string idat;
  int depth = 0, color = 0, interlace = 0;
  for (std::size_t at = 8; at + 12 <= file.size();) {
    const std::uint32_t length = be32(file, at);
    const std::string type = file.substr(at + 4, 4);
    if (at + 12 + length > file.size()) break;
    if (type == "IHDR") {
      img.width = static_cast<int>(be32(file, at + 8));
      img.height = static_cast<int>(be32(file, at + 12));
      depth = std::uint8_t(file[at + 16]);
      color = std::uint8_t(file[at + 17]);
      interlace = std::uint8_t(file[at + 20]);
    } else if (type == "IDAT") {
      idat.append(file, at + 8, length);
    }
    at += 12 + length;
  }
  if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
    img.error = "unsupported PNG: depth " + std::to_string(depth) + ", colour type " +
                std::to_string(color) + ", interlace " + std::to_string(interlace);
    return img;
  }
  img.channels = color == 2 ? 3 : 4;
  const std::size_t stride = static_cast<std::size_t>(img.width) * img.channels;
  std::vector<std::uint8_t> raw((stride + 1) * static_cast<std::size_t>(img.height));
  uLongf raw_size = raw.size();
  if (::uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()),
                   idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    img.error = "the image data does not inflate to " + std::to_string(raw.size()) + " bytes";
    return img;
  }
  img.pixels.assign(stride * img.height, 0);
  const int bpp = img.channels;
  for (int y = 0; y < img.height; ++y) {
    const std::uint8_t filter = raw[y * (stride + 1)];
    const std::uint8_t* in = &raw[y * (stride + 1) + 1];
    std::uint8_t* out = &img.pixels[y * stride];
    const std::uint8_t* up = y > 0 ? &img.pixels[(y - 1) * stride] : nullptr;
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<std::size_t>(bpp) ? out[x - bpp] : 0;
      const int b = up ? up[x] : 0;
      const int c = up && x >= static_cast<std::size_t>(bpp) ? up[x - bpp] : 0;
      int predicted = 0;
      switch (filter) {
        case 0:
          predicted = 0;
          break;
        case 1:
          predicted = a;
          break;
        case 2:
          predicted = b;
          break;
        case 3:
          predicted = (a + b) / 2;
          break;
        case 4:
          predicted = paeth(a, b, c);
          break;
        default:
          img.error = "bad filter " + std::to_string(filter) + " in row " + std::to_string(y);
          return img;
      }
      out[x] = static_cast<std::uint8_t>(in[x] + predicted);
    }
  }
  return img;
}

// Pixels within `tolerance` of the colour #rrggbb.
long pixels_near(const Image& img, std::uint32_t rgb, int tolerance) {
  const int r = (rgb >> 16) & 0xff, g = (rgb >> 8) & 0xff, b = rgb & 0xff;
  long n = 0;
  for (std::size_t i = 0; i + 2 < img.pixels.size(); i += img.channels) {
    if (std::abs(img.pixels[i] - r) <= tolerance && std::abs(img.pixels[i + 1] - g) <= tolerance &&
        std::abs(img.pixels[i + 2] - b) <= tolerance) {
      ++n;
    }
  }
  return n;
}

// --- running the browser -----------------------------------------------------------------------

class Browser {
 public:
  explicit Browser(std::string program) : program_(std::move(program)) {}

  // Runs chromium headless on `url` with `mode_args`; its stdout goes to `out`. The exit code,
  // or nullopt when it had to be killed at the deadline.
  std::optional<int> run(const std::vector<std::string>& mode_args, const std::string& url,
                         const std::string& out, const std::string& profile) {
    testing::SpawnOptions options;
    options.argv = {program_,
                    "--headless",
                    "--disable-gpu",
                    "--no-sandbox",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--hide-scrollbars",
                    "--user-data-dir=" + profile,
                    "--window-size=" + std::to_string(kWidth) + "," + std::to_string(kHeight)};
    options.argv.insert(options.argv.end(), mode_args.begin(), mode_args.end());
    options.argv.push_back(url);
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::size_t eq = entry.find('=');
      if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    // Everything the browser would keep in the home folder stays in the temporary one.
    env["HOME"] = home_.str();
    env["XDG_CONFIG_HOME"] = home_.file("config");
    env["XDG_CACHE_HOME"] = home_.file("cache");
    env["XDG_DATA_HOME"] = home_.file("data");
    options.env = env;
    options.stdout_path = out;
    options.stderr_path = out + ".stderr";
    options.own_process_group = true;  // the destructor kills the whole group
    testing::ChildProcess child(std::move(options));
    const std::optional<int> code = child.wait(kBrowserTimeout);
    stderr_tail_ = code ? "" : "killed after " + std::to_string(kBrowserTimeout.count()) + " s\n";
    stderr_tail_ += read_file(out + ".stderr");
    if (stderr_tail_.size() > 3000) stderr_tail_ = stderr_tail_.substr(stderr_tail_.size() - 3000);
    return code;
  }

  // The end of the last run's stderr, for failure messages.
  const std::string& stderr_tail() const { return stderr_tail_; }

 private:
  std::string program_;
  TempDir home_{"ddl_report_browser"};
  std::string stderr_tail_;
};

TEST(ReportRender, ChromiumRendersTheChartsAndTheTable) {
  const std::optional<std::string> chromium =
      find_on_path({"chromium", "chromium-browser", "google-chrome"});
  if (!chromium) {
    GTEST_SKIP() << "no chromium on PATH: the page is not rendered in a browser "
                    "(scripts/setup.sh installs Debian's chromium)";
  }
  TempDir dir("ddl_report_render");
  const WallClock::time_point t0 = WallClock::time_point(std::chrono::seconds(1714564800));
  testing::synthetic_report(t0).write(dir.str());
  const std::string url = "file://" + dir.file("report.html");

  Browser browser(*chromium);
  const std::string shot = dir.file("screenshot.png");
  const std::optional<int> shot_code =
      browser.run({"--screenshot=" + shot}, url, dir.file("shot.out"), dir.file("profile1"));
  ASSERT_TRUE(shot_code.has_value()) << browser.stderr_tail();
  EXPECT_EQ(*shot_code, 0) << browser.stderr_tail();
  const std::string png = read_file(shot);
  ASSERT_FALSE(png.empty()) << "no screenshot at " << shot << "\n" << browser.stderr_tail();
  if (const char* keep = std::getenv("DDL_REPORT_SCREENSHOT"); keep && *keep) {
    std::filesystem::copy_file(shot, keep, std::filesystem::copy_options::overwrite_existing);
  }

  const Image img = decode_png(png);
  ASSERT_TRUE(img.error.empty()) << img.error;
  EXPECT_EQ(img.width, kWidth);
  EXPECT_EQ(img.height, kHeight);
  const long total = static_cast<long>(img.width) * img.height;
  // Not blank: the page's grey background and white cards, plus a good share of ink.
  const long white = pixels_near(img, 0xffffff, 2);
  EXPECT_LT(white, total * 9 / 10) << "the screenshot is almost all white";
  EXPECT_GT(pixels_near(img, 0x1d2a3f, 6), 20000) << "no header band";
  // Both ranks' colours (their loss curves, accuracy markers and bars) and the timeline's green.
  EXPECT_GT(pixels_near(img, 0x1f77b4, 24), 1500) << "rank 0's colour is missing";
  EXPECT_GT(pixels_near(img, 0xff7f0e, 24), 1500) << "rank 1's colour is missing";

  const std::optional<int> dom_code =
      browser.run({"--dump-dom"}, url, dir.file("dom.html"), dir.file("profile2"));
  ASSERT_TRUE(dom_code.has_value()) << browser.stderr_tail();
  EXPECT_EQ(*dom_code, 0) << browser.stderr_tail();
  const std::string dom = read_file(dir.file("dom.html"));
  EXPECT_TRUE(contains(dom, "<svg")) << dom.substr(0, 2000);
  EXPECT_EQ(count(dom, "<polyline class=\"series\" data-name=\"rank 0\""), 3);
  EXPECT_EQ(count(dom, "<polyline class=\"series\" data-name=\"rank 1\""), 3);
  EXPECT_EQ(count(dom, "<rect class=\"bar\""), 2);
  EXPECT_TRUE(contains(dom, "<table class=\"data\" id=\"processes\">"));
  EXPECT_EQ(count(dom, "<td class=\"name\">rank "), 2);
  EXPECT_TRUE(contains(dom, "restart: rank 1 exited with code 1"));
}

}  // namespace
}  // namespace ddl::launcher
