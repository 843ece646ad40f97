// The control store in memory: every launcher of a test's job is a thread of one process holding
// a MemoryControlStore over the same MemoryControlState. It lets the engine's tests run every case
// (and every forged or deleted record) in milliseconds, against the same rules the TCP and etcd
// stores run.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "launcher/coord/control_store.h"

namespace ddl::launcher {

// What the launchers of one in-memory job share. Tests may write to it directly (a stranger).
struct MemoryControlState {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<std::string>> rosters;
  std::map<std::string, std::string> cells;
  bool outlives_launchers = true;
};

class MemoryControlStore final : public ControlStore {
 public:
  explicit MemoryControlStore(std::shared_ptr<MemoryControlState> state)
      : state_(std::move(state)) {}

  std::unique_ptr<ControlStore> connect() const override;
  void append(const std::string& roster, const std::string& value) override;
  std::vector<std::string> read(const std::string& roster, RosterCursor& cursor,
                                std::size_t limit) override;
  bool wait(const std::string& roster, RosterCursor cursor,
            std::chrono::milliseconds timeout) override;
  void put(const std::string& key, const std::string& value) override;
  std::vector<std::optional<std::string>> get(const std::vector<std::string>& keys) override;
  bool swap(const std::string& key, const std::optional<std::string>& expected,
            const std::optional<std::string>& desired) override;
  void erase(const std::string& prefix) override;
  bool outlives_launchers() const override { return state_->outlives_launchers; }
  int first_free_rank() const override { return 0; }
  bool hosted_here() const override { return false; }
  std::string where() const override { return "the in-memory control store"; }

 private:
  std::shared_ptr<MemoryControlState> state_;
};

}  // namespace ddl::launcher
