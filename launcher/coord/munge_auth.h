// Munge credentials for the control store of a Slurm job. Every Slurm cluster runs munged with
// one key shared by all its nodes (Slurm authenticates its own messages with it), so a credential
// that node 0's munged decodes was made on a node of this cluster, by the uid munge says. Under
// Slurm without DDL_JOB_SECRET the launchers admit each other with such credentials
// (launcher/job/job.cpp) and node 0 then hands every node the workers' secret through the
// authenticated store (Control::Agreement).
//
// - MungeClient: encode a payload into a credential / decode one, through the munged at one
//   socket (libmunge, munge.h); a failure is a MungeError saying which (munged unreachable at
//   PATH, expired, replayed, invalid, ...).
// - find_munge_socket(): the socket Slurm itself uses (slurm.conf's AuthInfo=...socket=PATH),
//   unless DDL_MUNGE_SOCKET says otherwise, else munge's default.
// - MungeAdmission: what the control store's clients present (a fresh credential per connection,
//   binding the Slurm job, the control store and the node) and the server's verdict on it.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>

#include "env/contract.h"
#include "launcher/coord/records.h"

namespace ddl::launcher {

// libmunge's compiled-in socket, when nothing names another.
inline constexpr const char* kMungeDefaultSocket = "/run/munge/munge.socket.2";

struct MungeSocket {
  std::string path;
  std::string source;  // for messages: "DDL_MUNGE_SOCKET", "AuthInfo in /etc/slurm/slurm.conf"
};

// DDL_MUNGE_SOCKET when set and not empty; else the socket= option of AuthInfo in slurm.conf
// (SLURM_CONF, else /etc/slurm/slurm.conf; a file that cannot be read or has no such option is
// passed over); else kMungeDefaultSocket. Never throws.
MungeSocket find_munge_socket(const env::EnvMap& env);

// Why munge refused: the daemon cannot be reached, or the credential is expired (older than its
// time-to-live), replayed (decoded before by this munged), invalid (another key, garbage, not a
// credential at all), or for another uid; kOther for the rest.
enum class MungeFailure { kUnreachable, kExpired, kReplayed, kInvalid, kUnauthorized, kOther };

// A munge operation that failed. what() names the socket and munge's own message.
class MungeError : public ControlError {
 public:
  MungeError(MungeFailure failure, const std::string& what)
      : ControlError(what), failure_(failure) {}
  MungeFailure failure() const { return failure_; }

 private:
  MungeFailure failure_;
};

// Talks to munged at one socket; every call opens its own munge context, so it is thread-safe.
// Copyable.
class MungeClient {
 public:
  explicit MungeClient(MungeSocket socket) : socket_(std::move(socket)) {}

  // A credential carrying `payload`, decodable only by this process's effective uid, with
  // munged's default time-to-live. Throws MungeError (kUnreachable when munged does not answer).
  std::string encode(const std::string& payload) const;

  struct Decoded {
    uid_t uid = 0;  // who made it, as munge vouches
    gid_t gid = 0;
    std::string payload;
  };
  // Throws MungeError saying why `credential` is refused.
  Decoded decode(const std::string& credential) const;

  const MungeSocket& socket() const { return socket_; }
  std::string where() const;  // "munged at PATH (from SOURCE)"

 private:
  MungeSocket socket_;
};

// The launchers of one job admitting each other with munge credentials. `scope` names the job
// (the Slurm job and the control store's job id, see launcher/job/job.cpp); a credential is
// admitted when munge decodes it (not expired, not replayed), it was made by this process's
// effective uid, and its payload names this scope and the node the hello claims.
class MungeAdmission {
 public:
  MungeAdmission(MungeClient client, std::string scope)
      : client_(std::move(client)), scope_(std::move(scope)) {}

  // A fresh credential for node `node` (kAutoNodeRank before node 0 assigned one). Throws
  // MungeError.
  std::string credential(int node) const;
  // "" when `presented` admits a launcher of this scope as `node`; else why not, in one line.
  // Never throws.
  std::string refusal(const std::string& presented, int node) const;

  const MungeClient& client() const { return client_; }
  const std::string& scope() const { return scope_; }

 private:
  std::string payload(int node) const;

  MungeClient client_;
  std::string scope_;
};

}  // namespace ddl::launcher
