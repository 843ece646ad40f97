#include "store/memory_store.h"

#include "store/store_detail.h"

namespace ddl {

using store_detail::deadline_after;
using store_detail::describe_keys;

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_until(lock, deadline, [&] { return data_.count(key) > 0; })) {
    throw StoreTimeout("get '" + key + "' timed out after " + std::to_string(timeout.count()) +
                       " ms: the key was not set");
  }
  return data_.at(key);
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    value = store_detail::add_to_counter(key, it == data_.end() ? nullptr : &it->second, delta);
    data_[key] = store_detail::counter_bytes(value);
  }
  changed_.notify_all();
  return value;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  return missing_locked(keys).empty();
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_until(lock, deadline, [&] { return missing_locked(keys).empty(); })) {
    const auto missing = missing_locked(keys);
    throw StoreTimeout("wait for " + std::to_string(keys.size()) + " key(s) timed out after " +
                       std::to_string(timeout.count()) + " ms; missing: " + describe_keys(missing));
  }
}

bool MemoryStore::wait_for(const std::vector<std::string>& keys,
                           std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return missing_locked(keys).empty(); });
}

std::optional<Bytes> MemoryStore::compare_set(const std::string& key,
                                              const std::optional<Bytes>& expected,
                                              const Bytes& desired) {
  std::optional<Bytes> now;
  bool swapped = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    const bool matches =
        it == data_.end() ? !expected.has_value() : expected.has_value() && it->second == *expected;
    if (matches) {
      data_[key] = desired;
      swapped = true;
      now = desired;
    } else if (it != data_.end()) {
      now = it->second;
    }
  }
  if (swapped) changed_.notify_all();
  return now;
}

bool MemoryStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_.erase(key) > 0;
}

void MemoryStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) Store::multi_set(keys, values);  // throws, naming both counts
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < keys.size(); ++i) data_[keys[i]] = values[i];
  }
  changed_.notify_all();
}

std::vector<Bytes> MemoryStore::multi_get(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_until(lock, deadline, [&] { return missing_locked(keys).empty(); })) {
    const auto missing = missing_locked(keys);
    throw StoreTimeout("multi-get of " + std::to_string(keys.size()) + " key(s) timed out after " +
                       std::to_string(timeout.count()) + " ms; " + std::to_string(missing.size()) +
                       " missing: " + describe_keys(missing));
  }
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(data_.at(key));
  return values;
}

namespace {

// A second handle on a MemoryStore: every call goes to the same (thread-safe) store.
class MemoryStoreView : public Store {
 public:
  explicit MemoryStoreView(Store& store) : store_(store) {}
  void set(const std::string& key, const Bytes& value) override { store_.set(key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return store_.get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return store_.add(key, delta);
  }
  bool check(const std::vector<std::string>& keys) override { return store_.check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    store_.wait(keys, timeout);
  }
  bool wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return store_.wait_for(keys, timeout);
  }
  std::optional<Bytes> compare_set(const std::string& key, const std::optional<Bytes>& expected,
                                   const Bytes& desired) override {
    return store_.compare_set(key, expected, desired);
  }
  bool delete_key(const std::string& key) override { return store_.delete_key(key); }
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override {
    store_.multi_set(keys, values);
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) override {
    return store_.multi_get(keys, timeout);
  }
  std::unique_ptr<Store> clone() override { return std::make_unique<MemoryStoreView>(store_); }

 private:
  Store& store_;
};

}  // namespace

std::unique_ptr<Store> MemoryStore::clone() { return std::make_unique<MemoryStoreView>(*this); }

std::vector<std::string> MemoryStore::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (data_.count(key) == 0) missing.push_back(key);
  }
  return missing;
}

}  // namespace ddl
