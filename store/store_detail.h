// Helpers shared by the Store implementations (store/store.cpp defines them). Not part of the
// public interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "net/deadline.h"
#include "store/store.h"

namespace ddl::store_detail {

// The transport's cap, clamp and deadline (net/deadline.h), used by every store.
using net::clamp_timeout;
using net::deadline_after;
using net::kMaxTimeout;

// "'a', 'b', 'c'" -- at most 10 keys, then "... (N more)".
std::string describe_keys(const std::vector<std::string>& keys);

// The new value of a counter holding `current` (nullptr: absent, counts as 0) after adding
// `delta`. Throws StoreError naming `key` when `current` is not a decimal int64 or the sum
// overflows.
std::int64_t add_to_counter(const std::string& key, const Bytes* current, std::int64_t delta);

// The decimal text `add` stores.
Bytes counter_bytes(std::int64_t value);

}  // namespace ddl::store_detail
