// A view of another store in which every key is "PREFIX/key": one user of a shared store (a
// communicator, a barrier, the launcher's control records) gets its own key space and cannot
// collide with another. Same contract as every Store; timeouts and errors name the full keys.
#pragma once

#include <string>

#include "store/store.h"

namespace ddl {

// Thread-safe when `base` is. Does not own `base`, which must outlive it.
class PrefixStore : public Store {
 public:
  // `prefix` must not be empty (throws StoreError); views nest ("a" over "b" gives "b/a/key").
  PrefixStore(Store& base, std::string prefix);
  // The same view over a store it owns.
  PrefixStore(std::unique_ptr<Store> base, std::string prefix);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> compare_set(const std::string& key, const std::optional<Bytes>& expected,
                                   const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) override;
  // The same prefix over a clone of the base store.
  std::unique_ptr<Store> clone() override;

  // The key `key` has in the base store.
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::vector<std::string> full_keys(const std::vector<std::string>& keys) const;

  std::unique_ptr<Store> owned_;  // set when this view owns its base
  Store& base_;
  std::string prefix_;
};

}  // namespace ddl
