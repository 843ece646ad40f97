#include "launcher/supervise/error_file.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "env/contract.h"
#include "env/file.h"

namespace ddl::launcher {

namespace {
constexpr std::size_t kMaxMessage = 300;
// An error file is a few KiB; more is not one (and is not read whole).
constexpr std::size_t kMaxFileBytes = 1 << 20;

// The file's text, without following a link planted under its name (a root launcher would
// otherwise quote another file in its summary) or blocking on a FIFO.
std::optional<std::string> read_small_file(const std::string& path) {
  try {
    return env::read_regular_file(path, kMaxFileBytes, env::kElasticErrorFile,
                                  env::FileLinks::kRefuse);
  } catch (const env::FileError&) {
    return std::nullopt;  // no message to quote: the summary says what it knows without one
  }
}
}  // namespace

std::optional<std::string> read_error_message(const std::string& path) {
  const std::optional<std::string> content = read_small_file(path);
  if (!content) return std::nullopt;
  const nlohmann::json data = nlohmann::json::parse(*content, nullptr, /*allow_exceptions=*/false);
  if (!data.is_object() || !data.contains("message")) return std::nullopt;
  const nlohmann::json& message = data["message"];
  std::string text;
  if (message.is_string()) {
    text = message.get<std::string>();
  } else if (message.is_object() && message.contains("message") && message["message"].is_string()) {
    text = message["message"].get<std::string>();
  } else {
    return std::nullopt;
  }
  text = text.substr(0, text.find('\n'));
  if (text.size() > kMaxMessage) text = text.substr(0, kMaxMessage) + "...";
  if (text.empty()) return std::nullopt;
  return text;
}

bool remove_error_file(const std::string& path, std::string& why) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) {
    why = "cannot remove the stale error file " + path + ": " + ec.message();
    return false;
  }
  return true;
}

}  // namespace ddl::launcher
