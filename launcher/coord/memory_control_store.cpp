#include "launcher/coord/memory_control_store.h"

#include <algorithm>

namespace ddl::launcher {

std::unique_ptr<ControlStore> MemoryControlStore::connect() const {
  return std::make_unique<MemoryControlStore>(state_);
}

void MemoryControlStore::append(const std::string& roster, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->rosters[roster].push_back(value);
  }
  state_->changed.notify_all();
}

std::vector<std::string> MemoryControlStore::read(const std::string& roster, RosterCursor& cursor,
                                                  std::size_t limit) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::string> out;
  const auto it = state_->rosters.find(roster);
  if (it == state_->rosters.end()) return out;
  const std::vector<std::string>& entries = it->second;
  while (static_cast<std::size_t>(cursor) < entries.size() && out.size() < limit) {
    out.push_back(entries[static_cast<std::size_t>(cursor)]);
    ++cursor;
  }
  return out;
}

bool MemoryControlStore::wait(const std::string& roster, RosterCursor cursor,
                              std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->changed.wait_for(lock, timeout, [&] {
    const auto it = state_->rosters.find(roster);
    return it != state_->rosters.end() && it->second.size() > static_cast<std::size_t>(cursor);
  });
}

void MemoryControlStore::put(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->cells[key] = value;
  }
  state_->changed.notify_all();
}

std::vector<std::optional<std::string>> MemoryControlStore::get(
    const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::optional<std::string>> out;
  for (const std::string& key : keys) {
    const auto it = state_->cells.find(key);
    out.push_back(it == state_->cells.end() ? std::nullopt : std::optional(it->second));
  }
  return out;
}

bool MemoryControlStore::swap(const std::string& key, const std::optional<std::string>& expected,
                              const std::optional<std::string>& desired) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    const auto it = state_->cells.find(key);
    const std::optional<std::string> now =
        it == state_->cells.end() ? std::nullopt : std::optional(it->second);
    if (now != expected) return false;
    if (desired) {
      state_->cells[key] = *desired;
    } else if (it != state_->cells.end()) {
      state_->cells.erase(it);
    }
  }
  state_->changed.notify_all();
  return true;
}

void MemoryControlStore::erase(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto starts = [&](const std::string& name) {
    return name.compare(0, prefix.size(), prefix) == 0;
  };
  for (auto it = state_->rosters.begin(); it != state_->rosters.end();) {
    it = starts(it->first) ? state_->rosters.erase(it) : std::next(it);
  }
  for (auto it = state_->cells.begin(); it != state_->cells.end();) {
    it = starts(it->first) ? state_->cells.erase(it) : std::next(it);
  }
}

}  // namespace ddl::launcher
