#include "env/host.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cctype>

#include "env/contract.h"

namespace ddl::env {

bool is_valid_host(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  if (host.find_first_not_of("0123456789.") == std::string_view::npos) {
    in_addr address{};
    return ::inet_pton(AF_INET, std::string(host).c_str(), &address) == 1;
  }
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = host.find('.', start);
    const std::string_view label =
        host.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string check_host(std::string_view host, std::string_view what, std::string_view value) {
  if (!is_valid_host(host)) {
    std::string message = std::string(what) + "='" + std::string(value) + "': ";
    message += host == value ? "not " : "'" + std::string(host) + "' is not ";
    throw EnvError(message + std::string(kHostRule));
  }
  return std::string(host);
}

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace ddl::env
