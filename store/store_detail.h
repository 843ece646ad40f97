// Helpers shared by the Store implementations (store/store.cpp defines them). Not part of the
// public interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace ddl::store_detail {

// Longest wait any store honours; longer timeouts are clamped to it so deadline arithmetic on
// steady_clock cannot overflow.
inline constexpr std::chrono::milliseconds kMaxTimeout{std::chrono::hours(24 * 365)};

// `timeout` clamped to [0, kMaxTimeout].
std::chrono::milliseconds clamp_timeout(std::chrono::milliseconds timeout);

// now + clamp_timeout(timeout), on steady_clock.
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);

// "'a', 'b', 'c'" -- at most 10 keys, then "... (N more)".
std::string describe_keys(const std::vector<std::string>& keys);

// The new value of a counter holding `current` (nullptr: absent, counts as 0) after adding
// `delta`. Throws StoreError naming `key` when `current` is not a decimal int64 or the sum
// overflows.
std::int64_t add_to_counter(const std::string& key, const Bytes* current, std::int64_t delta);

// The decimal text `add` stores.
Bytes counter_bytes(std::int64_t value);

}  // namespace ddl::store_detail
