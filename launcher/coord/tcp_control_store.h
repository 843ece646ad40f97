// The control store on node 0: node 0's launcher hosts a TcpStoreServer (the worker store's code,
// admitting holders of the job's secret or of a munge credential) and every launcher, node 0's
// included, connects to it. The job lives as long as node 0 does (as torchrun's c10d
// rendezvous). A roster is a ticket counter "<roster>/n" and one key per entry
// "<roster>/<ticket>", read incrementally; a cell is a key.
#pragma once

#include <memory>

#include "launcher/coord/control_plane.h"
#include "launcher/coord/control_store.h"

namespace ddl {
class TcpStore;
class TcpStoreServer;
struct TcpStoreOptions;
}  // namespace ddl

namespace ddl::launcher {

class TcpControlStore final : public ControlStore {
 public:
  // Node 0 starts the server; every launcher connects, retrying until the rendezvous deadline.
  // Under kAutoNodeRank the launcher that can host the store at the endpoint (its address is
  // this machine's and the port is free: the first one there) becomes node 0: `options.node_rank`
  // is set to 0. Throws ControlError: for a node that finds no store at node 0's address, one
  // that says node 0's rendezvous deadline may have passed or the job started or ended without it.
  explicit TcpControlStore(ControlOptions& options);
  ~TcpControlStore() override;

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
  void erase(const std::string&) override {}
  bool outlives_launchers() const override { return false; }
  int first_free_rank() const override { return 1; }
  bool hosted_here() const override { return server_ != nullptr; }
  std::string where() const override;

 private:
  TcpControlStore(const ControlOptions& options, std::shared_ptr<TcpStoreServer> server,
                  std::chrono::milliseconds connect_timeout);
  TcpStoreOptions store_options(std::chrono::milliseconds connect_timeout) const;
  template <typename F>
  auto call(const char* what, F&& f);

  ControlOptions options_;
  std::shared_ptr<TcpStoreServer> server_;  // node 0's; shared with its other connections
  std::unique_ptr<TcpStore> store_;
};

}  // namespace ddl::launcher
