// The checks of flag values: each parser takes the flag's spelling (for the message) and the value
// as typed, and throws OptionsError "--FLAG='VALUE': what was expected" when it is bad.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "env/contract.h"
#include "launcher/options/options.h"

namespace ddl::launcher {

// A flag's value that failed its check, as bad_value() throws it: the parts kept apart so that
// parse_options() can name the environment variable the value came from (PET_NNODES='x' (for
// --nnodes): ...).
class BadValueError : public OptionsError {
 public:
  BadValueError(std::string flag, std::string value, std::string expected)
      : OptionsError("--" + flag + "='" + value + "': " + expected),
        flag(std::move(flag)),
        value(std::move(value)),
        expected(std::move(expected)) {}

  std::string flag;  // the spelling the message names, without dashes
  std::string value;
  std::string expected;
};

[[noreturn]] void bad_value(const std::string& flag, const std::string& value,
                            const std::string& expected);

// "a,b,,c" -> {"a", "b", "", "c"}.
std::vector<std::string> split_commas(const std::string& text);
// torchrun's filter lists: "a,b" -> {"a", "b"}, a double comma is a comma ("1,,000" ->
// {"1,000"}); empty items are dropped, so "" is an empty list.
std::vector<std::string> parse_filter_list(const std::string& text);

// An integer in [min, max].
int parse_int_flag(const std::string& flag, const std::string& value, int min, int max);
// Seconds as typed by a user ("10", "0.5"): >= 0 when allow_zero, else > 0 (at least 1 ms).
std::chrono::milliseconds parse_seconds(const std::string& flag, const std::string& value,
                                        bool allow_zero);
// A finite number above `min` (or equal to it when `allow_min`), at most 1e6.
double parse_number(const std::string& flag, const std::string& value, double min, bool allow_min);
// "1.5", "5": a number as parse_number() reads it, written back.
std::string number_text(double v);
// true/false, 1/0, yes/no, on/off (any case); nullopt for any other word.
std::optional<bool> bool_word(std::string value);
// bool_word(), or an error.
bool parse_bool(const std::string& flag, const std::string& value);
// True for the words Paddle's space form of a boolean takes (--print_config False).
bool is_boolean_word(std::string value);
// A non-empty name without spaces, commas or '='.
std::string parse_name(const std::string& flag, const std::string& value);
// torchrun's Std spelling of --tee / --redirects: 0..3 for every local rank, or LOCAL_RANK:VALUE
// pairs; a rank is in the set when its value is not 0.
LocalRanks parse_streams(const std::string& flag, const std::string& value);
// --local_ranks_filter=0,2: local ranks, each a non-negative integer.
LocalRanks parse_rank_list(const std::string& flag, const std::string& value);
// Distinct non-negative GPU ids.
std::vector<int> parse_gpus(const std::string& flag, const std::string& value);
// `ip` when it is an IPv4 address or host name (`all` is the whole value, for the message).
std::string check_ip(const std::string& flag, const std::string& all, const std::string& ip);
// Distinct addresses.
std::vector<std::string> parse_ips(const std::string& flag, const std::string& value);
// An etcd cluster's client endpoints: HOST[:PORT] entries, comma separated, each optionally
// written http://HOST[:PORT] (as torchrun's etcd backends take them); port default
// kDefaultEtcdPort, each host a valid address, no endpoint twice. `all` is the whole value as
// typed, for the message.
std::vector<env::Endpoint> parse_etcd_endpoints(const std::string& flag, const std::string& all,
                                                const std::string& list);
// --servers / --workers: host:port entries, each host a valid address, no entry twice.
std::vector<env::Endpoint> parse_ps_endpoints(const std::string& flag, const std::string& value);

}  // namespace ddl::launcher
