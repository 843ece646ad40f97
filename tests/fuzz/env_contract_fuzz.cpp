// libFuzzer target: the env-contract parser. The input is read as "NAME=VALUE" lines; every
// contract reader must either accept the environment or throw EnvError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "env/contract.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ddl::env::EnvMap vars;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    std::size_t eq = line.find('=');
    if (eq != std::string_view::npos) vars[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  try {
    auto c = ddl::env::from_env(vars);
    if (c) {
      // What was accepted must survive a round trip unchanged.
      auto again = ddl::env::from_env(ddl::env::to_env(*c));
      if (!again || again->rank != c->rank || again->endpoints != c->endpoints) __builtin_trap();
    }
  } catch (const ddl::env::EnvError&) {
  }
  try {
    ddl::env::fault_spec(vars);
  } catch (const ddl::env::EnvError&) {
  }
  return 0;
}
