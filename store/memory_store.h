// An in-process Store: a map behind a mutex, for unit tests, for ranks run as threads, and for a
// world of one. Same contract as every Store (store/store.h); timeouts are measured on
// steady_clock from the moment of the call.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "store/store.h"

namespace ddl {

// Thread-safe. Not copyable or movable: threads share one instance by reference.
class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Throws StoreError when the stored value is not a decimal integer or the sum overflows.
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> compare_set(const std::string& key, const std::optional<Bytes>& expected,
                                   const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  // Under one lock each: a multi-set is seen whole, a multi-get reads one moment's values.
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) override;
  // A view of this store's data (this store must outlive it).
  std::unique_ptr<Store> clone() override;

 private:
  // Keys of `keys` not set yet. Caller holds mutex_.
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::condition_variable changed_;  // notified on every set/add
  std::map<std::string, Bytes> data_;
};

}  // namespace ddl
