#include "store/store.h"

#include <charconv>
#include <sstream>

#include "store/prefix_store.h"
#include "store/store_detail.h"

namespace ddl {
namespace store_detail {

std::string describe_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 10;
  std::ostringstream os;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) os << ", ";
    os << "'" << keys[i] << "'";
  }
  if (keys.size() > kShown) os << " ... (" << keys.size() - kShown << " more)";
  return os.str();
}

std::int64_t add_to_counter(const std::string& key, const Bytes* current, std::int64_t delta) {
  std::int64_t value = 0;
  if (current != nullptr) {
    const char* begin = current->data();
    const char* end = begin + current->size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (current->empty() || ec != std::errc() || ptr != end) {
      std::string shown(begin, std::min<std::size_t>(current->size(), 32));
      throw StoreError("add on key '" + key + "': the stored value '" + shown +
                       (current->size() > 32 ? "...'" : "'") + " is not a decimal 64-bit integer");
    }
  }
  std::int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    throw StoreError("add on key '" + key + "': " + std::to_string(value) + " + " +
                     std::to_string(delta) + " overflows a 64-bit integer");
  }
  return sum;
}

Bytes counter_bytes(std::int64_t value) {
  const std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

}  // namespace store_detail

namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  constexpr std::size_t kShown = 32;
  std::ostringstream os;
  for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    if (i > 0) os << ",";
    os << ranks[i];
  }
  if (ranks.size() > kShown) os << ",... (" << ranks.size() - kShown << " more)";
  return os.str();
}

// How long a timed-out barrier waits to read who arrived (each arrival is recorded right after
// it is counted, so this is short unless a rank died in between).
constexpr std::chrono::milliseconds kArrivalReadTimeout{2'000};

Bytes counter_bytes_of(int rank) { return store_detail::counter_bytes(rank); }

// The rank an arrival record holds; -1 when it is not one.
int parse_rank(const Bytes& v) {
  int r = -1;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
  return ec == std::errc() && ptr == v.data() + v.size() ? r : -1;
}

}  // namespace

void Store::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw StoreError("multi_set: " + std::to_string(keys.size()) + " key(s) but " +
                     std::to_string(values.size()) + " value(s)");
  }
  for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

std::vector<Bytes> Store::multi_get(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) {
  wait(keys, timeout);
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(get(k, std::chrono::milliseconds(0)));
  return values;
}

std::unique_ptr<Store> Store::clone() {
  throw StoreError("this store cannot open a second handle on its data");
}

void barrier(Store& store, const std::string& name, int rank, int world_size,
             std::chrono::milliseconds timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw StoreError("barrier '" + name + "': rank " + std::to_string(rank) +
                     " is outside a world of " + std::to_string(world_size));
  }
  // Three requests per rank whatever the world size: count the arrival (add), record who came
  // k-th ("arrived/k" = rank; the last also sets "done") in one multi-set, wait for "done". The
  // server's work per rank is constant too: every waiter is parked on the one key "done".
  PrefixStore keys(store, "ddl/barrier/" + name);
  const std::int64_t order = keys.add("count", 1);
  std::vector<std::string> set_keys{"arrived/" + std::to_string(order)};
  std::vector<Bytes> set_values{counter_bytes_of(rank)};
  if (order == world_size) {
    set_keys.push_back("done");
    set_values.push_back(Bytes{'1'});
  }
  keys.multi_set(set_keys, set_values);
  if (order == world_size || keys.wait_for({"done"}, timeout)) return;

  // Timed out: who came is read once, on this path only (one add and one multi-get).
  const std::int64_t counted = std::min<std::int64_t>(keys.add("count", 0), world_size);
  std::vector<std::string> slots;
  for (std::int64_t k = 1; k <= counted; ++k) slots.push_back("arrived/" + std::to_string(k));
  std::ostringstream os;
  os << "barrier '" << name << "' timed out after " << timeout.count() << " ms: " << counted << "/"
     << world_size << " ranks arrived";
  try {
    std::vector<bool> came(static_cast<std::size_t>(world_size), false);
    for (const Bytes& v : keys.multi_get(slots, kArrivalReadTimeout)) {
      const int r = parse_rank(v);
      if (r >= 0 && r < world_size) came[static_cast<std::size_t>(r)] = true;
    }
    std::vector<int> arrived;
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      (came[static_cast<std::size_t>(r)] ? arrived : missing).push_back(r);
    }
    os << " (" << join_ranks(arrived) << "); missing: " << join_ranks(missing);
  } catch (const StoreTimeout&) {
    // A rank counted itself and stopped before recording its rank (it died in between).
    os << "; which ones could not be read (a rank stopped between counting and recording "
          "its arrival)";
  }
  throw StoreTimeout(os.str());
}

}  // namespace ddl
