#include <algorithm>

#include "launcher/coord/control_store.h"

namespace ddl::launcher {
namespace {

class MemoryControlStore final : public ControlStore {
 public:
  explicit MemoryControlStore(std::shared_ptr<MemoryControlState> state)
      : state_(std::move(state)) {}

  std::unique_ptr<ControlStore> connect() const override {
    return std::make_unique<MemoryControlStore>(state_);
  }

  std::optional<RosterCursor> append(const std::string& roster,
                                     const std::string& value) override {
    RosterCursor position = 0;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      std::vector<std::string>& entries = state_->rosters[roster];
      entries.push_back(value);
      position = static_cast<RosterCursor>(entries.size());
    }
    state_->changed.notify_all();
    return position;
  }

  std::vector<std::string> read(const std::string& roster, RosterCursor& cursor,
                                std::size_t limit) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    std::vector<std::string> out;
    const auto it = state_->rosters.find(roster);
    if (it == state_->rosters.end()) return out;
    for (; static_cast<std::size_t>(cursor) < it->second.size() && out.size() < limit; ++cursor) {
      out.push_back(it->second[static_cast<std::size_t>(cursor)]);
    }
    return out;
  }

  bool wait(const std::string& roster, RosterCursor cursor,
            std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->changed.wait_for(lock, timeout, [&] {
      const auto it = state_->rosters.find(roster);
      return it != state_->rosters.end() && it->second.size() > static_cast<std::size_t>(cursor);
    });
  }

  void put(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->cells[key] = value;
    }
    state_->changed.notify_all();
  }

  std::vector<std::optional<std::string>> get(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    std::vector<std::optional<std::string>> out;
    for (const std::string& key : keys) out.push_back(cell(key));
    return out;
  }

  bool swap(const std::string& key, const std::optional<std::string>& expected,
            const std::optional<std::string>& desired) override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (cell(key) != expected) return false;
      if (desired) {
        state_->cells[key] = *desired;
      } else {
        state_->cells.erase(key);
      }
    }
    state_->changed.notify_all();
    return true;
  }

  void erase(const std::string& prefix) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto under = [&](const auto& entry) { return entry.first.rfind(prefix, 0) == 0; };
    for (auto it = state_->rosters.begin(); it != state_->rosters.end();) {
      it = under(*it) ? state_->rosters.erase(it) : std::next(it);
    }
    for (auto it = state_->cells.begin(); it != state_->cells.end();) {
      it = under(*it) ? state_->cells.erase(it) : std::next(it);
    }
  }

  bool outlives_launchers() const override { return state_->outlives_launchers; }
  int first_free_rank() const override { return 0; }
  bool hosted_here() const override { return false; }
  std::string where() const override { return "the in-memory control store"; }

 private:
  // Under state_->mutex.
  std::optional<std::string> cell(const std::string& key) const {
    const auto it = state_->cells.find(key);
    return it == state_->cells.end() ? std::nullopt : std::optional(it->second);
  }

  std::shared_ptr<MemoryControlState> state_;
};

}  // namespace

std::unique_ptr<ControlStore> make_memory_control_store(std::shared_ptr<MemoryControlState> state) {
  return std::make_unique<MemoryControlStore>(std::move(state));
}

}  // namespace ddl::launcher
