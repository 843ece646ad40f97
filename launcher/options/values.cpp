#include "launcher/options/values.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "env/host.h"
#include "env/text.h"

namespace ddl::launcher {

bool is_boolean_word(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "true" || v == "false" || v == "0" || v == "1";
}

[[noreturn]] void bad_value(const std::string& flag, const std::string& value,
                            const std::string& expected) {
  throw BadValueError(flag, value, expected);
}

std::vector<std::string> parse_filter_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      if (!item.empty()) out.push_back(item);
      item.clear();
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::string> split_commas(const std::string& text) { return env::split(text, ','); }

int parse_int_flag(const std::string& flag, const std::string& value, int min, int max) {
  int v = 0;
  try {
    // A leading '-' only where the range has room for it (--elastic_level=-1).
    const bool negative = min < 0 && value.size() > 1 && value[0] == '-';
    v = env::parse_non_negative_int(negative ? value.substr(1) : value, "--" + flag);
    if (negative) v = -v;
  } catch (const env::EnvError&) {
    bad_value(flag, value,
              "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  if (v < min || v > max) {
    bad_value(flag, value,
              "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

// Seconds as typed by a user ("10", "0.5") -> milliseconds.
std::chrono::milliseconds parse_seconds(const std::string& flag, const std::string& value,
                                        bool allow_zero) {
  const char* begin = value.c_str();
  char* end = nullptr;
  double s = std::strtod(begin, &end);
  const bool ok = !value.empty() && end == begin + value.size() && std::isfinite(s) &&
                  value.find_first_of(" \t+-eExXnN") == std::string::npos &&
                  (allow_zero ? s >= 0 : s > 0) && s <= 1e7;
  if (!ok) {
    bad_value(flag, value,
              std::string("expected a number of seconds ") + (allow_zero ? ">= 0" : "> 0"));
  }
  auto ms = std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000.0)));
  if (!allow_zero && ms.count() == 0) ms = std::chrono::milliseconds(1);
  return ms;
}

double parse_number(const std::string& flag, const std::string& value, double min, bool allow_min) {
  const char* begin = value.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  const bool ok = !value.empty() && end == begin + value.size() && std::isfinite(v) &&
                  value.find_first_of(" \t+eExXnN") == std::string::npos &&
                  (allow_min ? v >= min : v > min) && v <= 1e6;
  if (!ok) {
    bad_value(flag, value,
              "expected a number " + std::string(allow_min ? ">= " : "> ") + number_text(min));
  }
  return v;
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

std::optional<bool> bool_word(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return std::nullopt;
}

bool parse_bool(const std::string& flag, const std::string& value) {
  if (const std::optional<bool> b = bool_word(value)) return *b;
  bad_value(flag, value, "expected true or false");
}

// torchrun's Std spelling of --tee / --redirects: one value 0..3 for every local rank, or
// LOCAL_RANK:VALUE pairs; a rank is in the set when its value is not 0.
LocalRanks parse_streams(const std::string& flag, const std::string& value) {
  const std::string expected =
      "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:VALUE,... such as "
      "0:3,1:0";
  auto level = [&](const std::string& v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') bad_value(flag, value, expected);
    return v[0] - '0';
  };
  LocalRanks out;
  if (value.find(':') == std::string::npos) {
    out.all = level(value) != 0;
    return out;
  }
  std::set<int> seen;
  for (const std::string& part : split_commas(value)) {
    const auto colon = part.find(':');
    if (colon == std::string::npos) bad_value(flag, value, expected);
    int rank = 0;
    try {
      rank = env::parse_non_negative_int(part.substr(0, colon), "--" + flag);
    } catch (const env::EnvError&) {
      bad_value(flag, value, expected);
    }
    if (!seen.insert(rank).second) {
      bad_value(flag, value, "local rank " + std::to_string(rank) + " is listed twice");
    }
    if (level(part.substr(colon + 1)) != 0) out.ranks.push_back(rank);
  }
  std::sort(out.ranks.begin(), out.ranks.end());
  return out;
}

// --local_ranks_filter=0,2: local ranks, each a non-negative integer.
LocalRanks parse_rank_list(const std::string& flag, const std::string& value) {
  LocalRanks out;
  for (const std::string& part : split_commas(value)) {
    int rank = 0;
    try {
      rank = env::parse_non_negative_int(part, "--" + flag);
    } catch (const env::EnvError&) {
      bad_value(flag, value, "expected a comma-separated list of local ranks (0,1,...)");
    }
    if (std::find(out.ranks.begin(), out.ranks.end(), rank) == out.ranks.end()) {
      out.ranks.push_back(rank);
    }
  }
  std::sort(out.ranks.begin(), out.ranks.end());
  return out;
}

std::vector<int> parse_gpus(const std::string& flag, const std::string& value) {
  if (value.empty()) bad_value(flag, value, "expected a comma-separated list of GPU ids");
  std::vector<int> ids;
  for (const std::string& part : split_commas(value)) {
    int id = 0;
    try {
      id = env::parse_non_negative_int(part, "--" + flag);
    } catch (const env::EnvError&) {
      bad_value(flag, value, "GPU id '" + part + "' is not a non-negative integer");
    }
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      bad_value(flag, value, "GPU id " + std::to_string(id) + " is listed twice");
    }
    ids.push_back(id);
  }
  return ids;
}

std::string check_ip(const std::string& flag, const std::string& all, const std::string& ip) {
  if (!env::is_valid_host(ip)) {
    bad_value(flag, all, "'" + ip + "' is not " + std::string(env::kHostRule));
  }
  return ip;
}

std::vector<std::string> parse_ips(const std::string& flag, const std::string& value) {
  if (value.empty()) {
    bad_value(flag, value, "expected a comma-separated list of IPv4 addresses or host names");
  }
  std::vector<std::string> ips;
  for (const std::string& part : split_commas(value)) {
    check_ip(flag, value, part);
    if (std::find(ips.begin(), ips.end(), part) != ips.end()) {
      bad_value(flag, value, "address '" + part + "' is listed twice");
    }
    ips.push_back(part);
  }
  return ips;
}

std::vector<env::Endpoint> parse_etcd_endpoints(const std::string& flag, const std::string& all,
                                                const std::string& list) {
  if (list.empty()) bad_value(flag, all, "expected etcd endpoints, HOST[:PORT][,HOST[:PORT]...]");
  std::vector<env::Endpoint> endpoints;
  for (const std::string& entry : split_commas(list)) {
    if (entry.empty()) {
      bad_value(flag, all, "an empty entry; expected HOST[:PORT][,HOST[:PORT]...] of etcd members");
    }
    std::string hostport = entry;
    if (hostport.rfind("http://", 0) == 0) {
      hostport = hostport.substr(7);
    } else if (hostport.find("://") != std::string::npos) {
      // https would need TLS, which the etcd client does not speak; other schemes are typos.
      bad_value(flag, all,
                "'" + entry + "': only http:// etcd endpoints are supported (HOST[:PORT])");
    }
    const auto colon = hostport.rfind(':');
    env::Endpoint e;
    e.host = check_ip(flag, all, colon == std::string::npos ? hostport : hostport.substr(0, colon));
    int port = kDefaultEtcdPort;
    if (colon != std::string::npos) {
      try {
        port = parse_int_flag(flag, hostport.substr(colon + 1), 1, 65535);
      } catch (const BadValueError&) {
        // Quote the whole value, so that a variable that gave it can be named.
        bad_value(flag, all, "'" + entry + "': expected a port in [1, 65535] after the ':'");
      }
    }
    e.port = static_cast<std::uint16_t>(port);
    if (std::find(endpoints.begin(), endpoints.end(), e) != endpoints.end()) {
      bad_value(flag, all, "etcd endpoint '" + e.str() + "' is listed twice");
    }
    endpoints.push_back(e);
  }
  return endpoints;
}

// --servers / --workers: host:port entries, each host a valid address, no entry twice.
std::vector<env::Endpoint> parse_ps_endpoints(const std::string& flag, const std::string& value) {
  for (const std::string& entry : split_commas(value)) {
    // Name a bad host as such (the list's own message below is about its shape).
    const std::size_t colon = entry.rfind(':');
    if (colon != std::string::npos && colon > 0) check_ip(flag, value, entry.substr(0, colon));
  }
  std::vector<env::Endpoint> endpoints;
  try {
    endpoints = env::parse_endpoint_list(value, "--" + flag);
  } catch (const env::EnvError&) {
    bad_value(flag, value, "expected a comma-separated list of ip:port (port 1..65535)");
  }
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (endpoints[j] == endpoints[i]) {
        bad_value(flag, value, "endpoint '" + endpoints[i].str() + "' is listed twice");
      }
    }
  }
  return endpoints;
}

std::string parse_name(const std::string& flag, const std::string& v) {
  if (v.empty() || v.find_first_of(" \t\n,=") != std::string::npos) {
    bad_value(flag, v, "expected a non-empty name without spaces, commas or '='");
  }
  return v;
}

}  // namespace ddl::launcher
