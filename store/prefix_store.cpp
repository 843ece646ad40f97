#include "store/prefix_store.h"

namespace ddl {

PrefixStore::PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {
  if (prefix_.empty()) throw StoreError("PrefixStore: the prefix must not be empty");
}

PrefixStore::PrefixStore(std::unique_ptr<Store> base, std::string prefix)
    : owned_(std::move(base)), base_(*owned_), prefix_(std::move(prefix)) {
  if (prefix_.empty()) throw StoreError("PrefixStore: the prefix must not be empty");
}

std::vector<std::string> PrefixStore::full_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full_key(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_.set(full_key(key), value); }

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_.get(full_key(key), timeout);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) {
  return base_.add(full_key(key), delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_.check(full_keys(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_.wait(full_keys(keys), timeout);
}

bool PrefixStore::wait_for(const std::vector<std::string>& keys,
                           std::chrono::milliseconds timeout) {
  return base_.wait_for(full_keys(keys), timeout);
}

std::optional<Bytes> PrefixStore::compare_set(const std::string& key,
                                              const std::optional<Bytes>& expected,
                                              const Bytes& desired) {
  return base_.compare_set(full_key(key), expected, desired);
}

bool PrefixStore::delete_key(const std::string& key) { return base_.delete_key(full_key(key)); }

void PrefixStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  base_.multi_set(full_keys(keys), values);
}

std::vector<Bytes> PrefixStore::multi_get(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) {
  return base_.multi_get(full_keys(keys), timeout);
}

std::unique_ptr<Store> PrefixStore::clone() {
  return std::make_unique<PrefixStore>(base_.clone(), prefix_);
}

}  // namespace ddl
