#include "launcher/supervise/error_file.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

namespace ddl::launcher {

namespace {
constexpr std::size_t kMaxMessage = 300;
}  // namespace

std::optional<std::string> read_error_message(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json data = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
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
