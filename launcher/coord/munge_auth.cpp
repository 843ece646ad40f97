#include "launcher/coord/munge_auth.h"

#include <munge.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "env/file.h"
#include "env/slurm.h"

namespace ddl::launcher {
namespace {

constexpr const char* kPayloadTag = "ddlaunch control store";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The socket= option of an AuthInfo line's value ("cred_expire=120,socket=/run/m.sock").
std::string socket_option(const std::string& auth_info) {
  std::istringstream options(auth_info);
  for (std::string option; std::getline(options, option, ',');) {
    if (lower(option.substr(0, 7)) == "socket=") return option.substr(7);
  }
  return "";
}

// slurm.conf is a few KiB; anything past this is not one (a device, a runaway file).
constexpr std::size_t kMaxSlurmConfBytes = 4 << 20;

// AuthInfo's socket in slurm.conf at `path` (keys are case-insensitive; '#' starts a comment);
// "" when the file cannot be read or names none.
std::string slurm_conf_socket(const std::string& path) {
  std::istringstream in;
  try {
    in.str(env::read_regular_file(path, kMaxSlurmConfBytes, "slurm.conf"));
  } catch (const env::FileError& e) {
    spdlog::debug("not reading {}", e.what());
    return "";
  }
  std::string found;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (lower(word.substr(0, 9)) != "authinfo=") continue;
      if (const std::string s = socket_option(word.substr(9)); !s.empty()) found = s;
    }
  }
  return found;
}

MungeFailure failure_of(munge_err_t e) {
  switch (e) {
    case EMUNGE_SOCKET:
    case EMUNGE_TIMEOUT:
      return MungeFailure::kUnreachable;
    case EMUNGE_CRED_EXPIRED:
    case EMUNGE_CRED_REWOUND:
      return MungeFailure::kExpired;
    case EMUNGE_CRED_REPLAYED:
      return MungeFailure::kReplayed;
    case EMUNGE_BAD_ARG:
    case EMUNGE_BAD_LENGTH:
    case EMUNGE_BAD_CRED:
    case EMUNGE_BAD_VERSION:
    case EMUNGE_BAD_CIPHER:
    case EMUNGE_BAD_MAC:
    case EMUNGE_BAD_ZIP:
    case EMUNGE_BAD_REALM:
    case EMUNGE_CRED_INVALID:
      return MungeFailure::kInvalid;
    case EMUNGE_CRED_UNAUTHORIZED:
      return MungeFailure::kUnauthorized;
    default:
      return MungeFailure::kOther;
  }
}

// One munge context aimed at `socket`, destroyed with the object.
class Context {
 public:
  explicit Context(const MungeClient& client) : ctx_(munge_ctx_create()) {
    if (ctx_ == nullptr) {
      throw MungeError(MungeFailure::kOther, "cannot create a munge context (out of memory)");
    }
    check(munge_ctx_set(ctx_, MUNGE_OPT_SOCKET, client.socket().path.c_str()), client,
          "setting munge's socket");
  }
  ~Context() { munge_ctx_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  munge_ctx_t get() const { return ctx_; }

  // Throws MungeError for anything but success, with munge's message for this context.
  void check(munge_err_t e, const MungeClient& client, const std::string& doing) const {
    if (e == EMUNGE_SUCCESS) return;
    const char* detail = munge_ctx_strerror(ctx_);
    std::string what =
        doing + " through " + client.where() + ": " + (detail ? detail : munge_strerror(e));
    if (failure_of(e) == MungeFailure::kUnreachable) what += " (is munged running there?)";
    throw MungeError(failure_of(e), what);
  }

 private:
  munge_ctx_t ctx_;
};

}  // namespace

MungeSocket find_munge_socket(const env::EnvMap& env) {
  if (auto socket = env::lookup(env, env::kMungeSocket); socket && !socket->empty()) {
    return {*socket, env::kMungeSocket};
  }
  const std::string conf = env::lookup(env, env::kSlurmConf).value_or(env::kDefaultSlurmConf);
  if (std::string socket = slurm_conf_socket(conf); !socket.empty()) {
    return {socket, "AuthInfo in " + conf};
  }
  return {kMungeDefaultSocket, "munge's default"};
}

std::string MungeClient::where() const {
  return "munged at " + socket_.path + " (from " + socket_.source + ")";
}

std::string MungeClient::encode(const std::string& payload) const {
  Context ctx(*this);
  ctx.check(munge_ctx_set(ctx.get(), MUNGE_OPT_UID_RESTRICTION, ::geteuid()), *this,
            "restricting the credential to this uid");
  char* credential = nullptr;
  const munge_err_t e =
      munge_encode(&credential, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  std::unique_ptr<char, decltype(&std::free)> owned(credential, &std::free);
  ctx.check(e, *this, "making a munge credential");
  return credential;
}

MungeClient::Decoded MungeClient::decode(const std::string& credential) const {
  Context ctx(*this);
  void* payload = nullptr;
  int length = 0;
  Decoded decoded;
  const munge_err_t e =
      munge_decode(credential.c_str(), ctx.get(), &payload, &length, &decoded.uid, &decoded.gid);
  std::unique_ptr<void, decltype(&std::free)> owned(payload, &std::free);
  ctx.check(e, *this, "decoding a munge credential");
  if (payload != nullptr && length > 0) {
    decoded.payload.assign(static_cast<const char*>(payload), static_cast<std::size_t>(length));
  }
  return decoded;
}

std::string MungeAdmission::payload(int node) const {
  return std::string(kPayloadTag) + "\nscope=" + scope_ + "\nnode=" + std::to_string(node);
}

std::string MungeAdmission::credential(int node) const { return client_.encode(payload(node)); }

std::string MungeAdmission::refusal(const std::string& presented, int node) const {
  MungeClient::Decoded decoded;
  try {
    decoded = client_.decode(presented);
  } catch (const MungeError& e) {
    return std::string("munge credential refused: ") + e.what();
  }
  if (decoded.uid != ::geteuid()) {
    // The reason goes back to the stranger: it names their uid, not ours. Past this check the
    // peer is the job's own user, who may read the scope below.
    return "munge credential of uid " + std::to_string(decoded.uid) +
           " refused: not the user this job runs as";
  }
  if (decoded.payload != payload(node)) {
    std::string seen = decoded.payload.substr(0, 200);
    std::replace(seen.begin(), seen.end(), '\n', ' ');
    return "munge credential for another job or node refused: it carries '" + seen +
           "', expected '" + std::string(kPayloadTag) + " scope=" + scope_ +
           " node=" + std::to_string(node) + "'";
  }
  return "";
}

}  // namespace ddl::launcher
