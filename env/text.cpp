#include "env/text.h"

#include <cctype>
#include <sstream>

namespace ddl::env {

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string join(const std::vector<int>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(items[i]);
  }
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = text.find(sep, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0;
  return os.str();
}

namespace {

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::string substitute_template(std::string_view text,
                                const std::map<std::string, std::string>& values) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t dollar = text.find('$', i);
    if (dollar == std::string_view::npos || dollar + 1 == text.size()) {
      out += text.substr(i);
      break;
    }
    out += text.substr(i, dollar - i);
    const std::size_t after = dollar + 1;
    if (text[after] == '$') {
      out += '$';
      i = after + 1;
      continue;
    }
    const bool braced = text[after] == '{';
    const std::size_t start = braced ? after + 1 : after;
    std::size_t end = start;
    if (end < text.size() && name_start(text[end])) {
      while (end < text.size() && name_char(text[end])) ++end;
    }
    const bool closed = !braced || (end < text.size() && text[end] == '}');
    const auto it = end > start ? values.find(std::string(text.substr(start, end - start)))
                                : values.end();
    if (end == start || !closed || it == values.end()) {
      out += '$';  // no name here, or one without a value: kept as typed
      i = after;
      continue;
    }
    out += it->second;
    i = braced ? end + 1 : end;
  }
  return out;
}

}  // namespace ddl::env
