#include "launcher/fanout/hosts.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "env/error.h"
#include "env/host.h"
#include "env/text.h"
#include "launcher/options/options.h"

namespace ddl::launcher::fanout {
namespace {

// A count or index of digits only, in [min, 100000]; nullopt otherwise.
std::optional<int> number(const std::string& text, int min) {
  if (text.empty() || text.size() > 6 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  const int v = std::stoi(text);
  if (v < min) return std::nullopt;
  return v;
}

std::string checked_host(const std::string& host, const std::string& what,
                         const std::string& value) {
  try {
    return env::check_host(host, what, value);
  } catch (const env::EnvError& e) {
    throw OptionsError(e.what());
  }
}

HostSlots with_slots(std::string host, int count) {
  HostSlots h;
  h.host = std::move(host);
  for (int i = 0; i < count; ++i) h.slots.push_back(i);
  return h;
}

void add_unique(std::vector<HostSlots>& hosts, HostSlots h, const std::string& where) {
  for (const HostSlots& other : hosts) {
    if (other.host == h.host) throw OptionsError(where + ": host '" + h.host + "' is listed twice");
  }
  hosts.push_back(std::move(h));
}

// One `HOST[:SLOT,SLOT...]` of an --include or --exclude, against `hosts`.
struct Named {
  std::string host;
  std::vector<int> slots;  // empty: the whole host
};

std::vector<Named> parse_named(const std::string& flag, const std::string& value,
                               const std::vector<HostSlots>& hosts) {
  std::vector<Named> out;
  for (const std::string& part : env::split(value, '@')) {
    const std::size_t colon = part.find(':');
    Named n;
    n.host = checked_host(part.substr(0, colon), "--" + flag, value);
    const auto it = std::find_if(hosts.begin(), hosts.end(),
                                 [&](const HostSlots& h) { return h.host == n.host; });
    if (it == hosts.end()) {
      throw OptionsError("--" + flag + "='" + value + "': host '" + n.host +
                         "' is not in the host list");
    }
    if (colon != std::string::npos) {
      for (const std::string& s : env::split(part.substr(colon + 1), ',')) {
        const std::optional<int> slot = number(s, 0);
        if (!slot || std::find(it->slots.begin(), it->slots.end(), *slot) == it->slots.end()) {
          throw OptionsError("--" + flag + "='" + value + "': '" + s + "' is not a slot of '" +
                             n.host + "' (0.." + std::to_string(it->slots.size() - 1) + ")");
        }
        n.slots.push_back(*slot);
      }
    }
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace

std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& file) {
  std::vector<HostSlots> hosts;
  std::istringstream lines(text);
  std::string raw;
  for (int number_of_line = 1; std::getline(lines, raw); ++number_of_line) {
    const std::string line = std::string(env::trim(raw.substr(0, raw.find('#'))));
    if (line.empty()) continue;
    const std::string where = file + " line " + std::to_string(number_of_line);
    std::istringstream words(line);
    std::string host, slots_word, extra;
    words >> host >> slots_word >> extra;
    int slots = 1;
    if (!slots_word.empty()) {
      const std::optional<int> n =
          slots_word.rfind("slots=", 0) == 0 ? number(slots_word.substr(6), 1) : std::nullopt;
      if (!n || !extra.empty()) {
        throw OptionsError(where + ": '" + std::string(env::trim(raw)) +
                           "': expected 'HOST slots=N' (N >= 1)");
      }
      slots = *n;
    }
    add_unique(hosts, with_slots(checked_host(host, where, std::string(env::trim(raw))), slots),
               where);
  }
  if (hosts.empty()) throw OptionsError(file + ": no host in it");
  return hosts;
}

std::vector<HostSlots> parse_host_list(const std::string& list) {
  std::vector<HostSlots> hosts;
  for (const std::string& entry : env::split(list, ',')) {
    const std::size_t colon = entry.find(':');
    int slots = 1;
    if (colon != std::string::npos) {
      const std::optional<int> n = number(entry.substr(colon + 1), 1);
      if (!n) {
        throw OptionsError("--hosts='" + list + "': '" + entry +
                           "': expected HOST[:SLOTS] (SLOTS >= 1)");
      }
      slots = *n;
    }
    add_unique(hosts, with_slots(checked_host(entry.substr(0, colon), "--hosts", list), slots),
               "--hosts='" + list + "'");
  }
  return hosts;
}

std::vector<HostSlots> select_hosts(std::vector<HostSlots> hosts, const Selection& selection) {
  if (selection.include) {
    std::vector<HostSlots> kept;
    for (const Named& n : parse_named("include", *selection.include, hosts)) {
      HostSlots h = *std::find_if(hosts.begin(), hosts.end(),
                                  [&](const HostSlots& x) { return x.host == n.host; });
      if (!n.slots.empty()) {
        std::set<int> chosen(n.slots.begin(), n.slots.end());
        h.slots.assign(chosen.begin(), chosen.end());
        h.chosen = true;
      }
      add_unique(kept, std::move(h), "--include='" + *selection.include + "'");
    }
    hosts = std::move(kept);
  }
  if (selection.exclude) {
    for (const Named& n : parse_named("exclude", *selection.exclude, hosts)) {
      auto it = std::find_if(hosts.begin(), hosts.end(),
                             [&](const HostSlots& x) { return x.host == n.host; });
      if (n.slots.empty()) {
        hosts.erase(it);
        continue;
      }
      for (int s : n.slots)
        it->slots.erase(std::remove(it->slots.begin(), it->slots.end(), s), it->slots.end());
      it->chosen = true;
      if (it->slots.empty()) hosts.erase(it);
    }
  }
  if (selection.num_nodes && *selection.num_nodes < static_cast<int>(hosts.size())) {
    hosts.resize(static_cast<std::size_t>(*selection.num_nodes));
  }
  if (selection.num_gpus) {
    for (HostSlots& h : hosts) {
      if (*selection.num_gpus < static_cast<int>(h.slots.size())) {
        h.slots.resize(static_cast<std::size_t>(*selection.num_gpus));
      }
    }
  }
  if (hosts.empty()) throw OptionsError("--include/--exclude left no host to run on");
  return hosts;
}

}  // namespace ddl::launcher::fanout
