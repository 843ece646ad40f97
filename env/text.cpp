#include "env/text.h"

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

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0;
  return os.str();
}

}  // namespace ddl::env
