#include "launcher/job/identity.h"

#include <algorithm>
#include <cctype>

#include "launcher/cluster/plan.h"

namespace ddl::launcher {
namespace {

constexpr std::size_t kJobSecretBytes = 16;

const std::string kMakeSecret =
    std::string("export ") + env::kJobSecret +
    "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') on every node";

}  // namespace

Identity choose_identity(const IdentityRequest& request) {
  if (request.nnodes < 2) {
    return {IdentityMode::kSingleNode, request.caller_secret.value_or(random_hex(kJobSecretBytes))};
  }
  const bool static_job =
      request.listed_hosts || (request.paddle_static && !request.caller_secret);
  if (!request.caller_secret && !static_job && !request.etcd && request.slurm_job &&
      !request.slurm_job->empty()) {
    return {IdentityMode::kMunge, random_hex(kJobSecretBytes)};
  }
  if (!request.caller_secret && request.require_secret) {
    throw PlanError("a job of " + std::to_string(request.nnodes) + " nodes (from " +
                    request.source + ") needs the same " + env::kJobSecret +
                    " on every node (--require_secret or " + env::kRequireSecret +
                    " demands it): it admits the launchers to " +
                    (request.etcd ? "the job's control plane" : "node 0's control store") +
                    " and the workers to their store. Set it before starting launch on each "
                    "node, e.g. " +
                    kMakeSecret + " (srun passes the caller's environment on; mpirun needs -x " +
                    env::kJobSecret + " on other machines)");
  }
  if (static_job) {
    return {IdentityMode::kStatic, request.caller_secret.value_or("")};
  }
  if (request.caller_secret) return {IdentityMode::kControlStore, *request.caller_secret};
  return {IdentityMode::kOpenControlStore, ""};
}

bool secret_required_by(const env::EnvMap& env) {
  const auto value = env::lookup(env, env::kRequireSecret);
  if (!value || value->empty()) return false;
  std::string v = *value;
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  throw env::EnvError(std::string(env::kRequireSecret) + "='" + *value +
                      "': expected 1, true, yes, 0, false or no");
}

std::string without_secret_notice(IdentityMode mode, const std::string& control_endpoint) {
  switch (mode) {
    case IdentityMode::kStatic:
      return std::string("no ") + env::kJobSecret +
             ": a static job as Paddle runs it (every node computes the endpoints itself, no "
             "control store; a failure stops this node's workers only, the workers' store admits "
             "anyone who can reach it); the same secret on every node adds cross-node fail-fast, "
             "job-wide restarts and authenticated stores: " +
             kMakeSecret;
    case IdentityMode::kOpenControlStore:
      return std::string("no ") + env::kJobSecret + ": launch's control store (" +
             control_endpoint +
             ") and the workers' stores admit anyone who can reach their ports, as torchrun's "
             "do; to authenticate them, " +
             kMakeSecret + " (" + env::kRequireSecret + "=1 makes the secret required)";
    case IdentityMode::kSingleNode:
    case IdentityMode::kControlStore:
    case IdentityMode::kMunge:
      break;
  }
  return "";
}

}  // namespace ddl::launcher
