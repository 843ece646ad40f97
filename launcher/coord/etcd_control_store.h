// The control store in an etcd v3 cluster (--rdzv_backend=etcd|etcd-v2, --master=etcd://...):
// no launcher is special, so the job outlives any node, node 0 included. Every name lives under
// "/ddl/<job id>/". A roster entry is a key "<roster>/<writer>.<n>" ordered by its create
// revision (etcd's one order of writes, the same for every reader), so a cursor is a revision and
// a wait is a watch from the next one; a cell is a key; swap is a transaction.
#pragma once

#include <memory>

#include "launcher/coord/control_plane.h"
#include "launcher/coord/control_store.h"

namespace ddl::etcd {
class Client;
}  // namespace ddl::etcd

namespace ddl::launcher {

class EtcdControlStore final : public ControlStore {
 public:
  // Reaches the cluster, retrying until the rendezvous deadline: a ControlError naming every
  // endpoint tried when none answered. Refuses munge admission (the launchers of an etcd job
  // share DDL_JOB_SECRET instead).
  explicit EtcdControlStore(const ControlOptions& options);
  ~EtcdControlStore() override;

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
  bool outlives_launchers() const override { return true; }
  int first_free_rank() const override { return 0; }
  bool hosted_here() const override { return false; }
  std::string where() const override;

  // "/ddl/<job id>/": where this job's names live, for tests.
  const std::string& prefix() const { return prefix_; }

 private:
  EtcdControlStore(const EtcdControlStore& other);
  template <typename F>
  auto call(const char* what, F&& f);

  ControlOptions options_;
  std::string prefix_;
  std::string writer_;  // this connection's part of its entries' keys
  std::int64_t appended_ = 0;
  std::unique_ptr<etcd::Client> client_;
};

}  // namespace ddl::launcher
