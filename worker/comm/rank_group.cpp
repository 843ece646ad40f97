// Sub-groups: validation, renumbering, the label and the claim of the group's store prefix.
#include "worker/comm/rank_group.h"

#include <cstdint>
#include <cstdio>
#include <set>

#include "env/text.h"
#include "store/prefix_store.h"
#include "worker/comm/comm_error.h"

namespace ddl {
namespace {

// Rank lists up to this long are written out in the label; longer ones are summarised.
constexpr std::size_t kLabelRanks = 16;

// FNV-1a over the rank list, for the label of a long list.
std::uint64_t fingerprint(const std::vector<int>& ranks) {
  std::uint64_t h = 14695981039346656037ull;
  for (int r : ranks) {
    auto v = static_cast<std::uint32_t>(r);
    for (int byte = 0; byte < 4; ++byte) {
      h ^= (v >> (8 * byte)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::string label_of(const std::vector<int>& ranks) {
  if (ranks.size() <= kLabelRanks) return "ranks_" + env::join(ranks, "_");
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fingerprint(ranks)));
  return "ranks_" + std::to_string(ranks.size()) + "_from_" + std::to_string(ranks.front()) +
         "_to_" + std::to_string(ranks.back()) + "_" + hash;
}

}  // namespace

GroupPlace place_in_group(const std::string& backend, int job_rank, int job_size,
                          const RankGroup& group, const std::string& job_prefix) {
  const std::string where = backend + " group on job rank " + std::to_string(job_rank) + " of " +
                            std::to_string(job_size) + ": ";
  if (job_size < 1 || job_rank < 0 || job_rank >= job_size) {
    throw CommError(where + "the rank is not within the job's world size");
  }
  if (group.ranks.empty()) throw CommError(where + "the group's rank list is empty");
  if (group.name.find('/') != std::string::npos) {
    throw CommError(where + "group name '" + group.name + "' must not contain '/'");
  }
  const std::string listed = env::join(group.ranks, ",");
  std::set<int> seen;
  GroupPlace place;
  place.rank = -1;
  for (std::size_t i = 0; i < group.ranks.size(); ++i) {
    const int r = group.ranks[i];
    if (r < 0 || r >= job_size) {
      throw CommError(where + "rank " + std::to_string(r) + " in the group [" + listed +
                      "] is not a job rank (expected 0.." + std::to_string(job_size - 1) + ")");
    }
    if (!seen.insert(r).second) {
      throw CommError(where + "rank " + std::to_string(r) + " appears twice in the group [" +
                      listed + "]");
    }
    if (r == job_rank) place.rank = static_cast<int>(i);
  }
  if (place.rank < 0) {
    throw CommError(where + "this rank is not a member of the group [" + listed +
                    "]; only members build a group");
  }
  place.size = static_cast<int>(group.ranks.size());
  place.job_rank = job_rank;
  place.label = group.name.empty() ? label_of(group.ranks) : group.name;
  place.store_prefix = job_prefix + "/group/" + place.label;
  place.ranks_text = listed;
  return place;
}

void claim_group(Store& store, const GroupPlace& place, const std::string& backend,
                 std::chrono::milliseconds timeout) {
  const std::string where =
      backend + " group '" + place.label + "' on job rank " + std::to_string(place.job_rank) +
      " (group rank " + std::to_string(place.rank) + " of " + std::to_string(place.size) + "): ";
  // The claim's keys: PREFIX/claim/members and PREFIX/claim/ranks.
  PrefixStore claim(store, place.store_prefix + "/claim");
  const std::string members_key = "members";
  const std::string ranks_key = "ranks";
  try {
    // Each member adds one: a first use counts 1..size, any later use of the prefix goes past it.
    const std::int64_t arrived = claim.add(members_key, 1);
    if (arrived > place.size) {
      throw CommError(where + "the store prefix '" + place.store_prefix +
                      "' was already used by a group (" + std::to_string(arrived - 1) +
                      " members claimed it for " + std::to_string(place.size) +
                      " places); give this group another name");
    }
    if (place.rank == 0) {
      claim.set(ranks_key, Bytes(place.ranks_text.begin(), place.ranks_text.end()));
      return;
    }
    const Bytes theirs = claim.get(ranks_key, timeout);
    const std::string listed(theirs.begin(), theirs.end());
    if (listed != place.ranks_text) {
      throw CommError(where + "group rank 0 built the group over ranks [" + listed +
                      "], this rank over [" + place.ranks_text + "]");
    }
  } catch (const StoreTimeout& e) {
    throw CommError(where + "group rank 0 did not publish its rank list within " +
                    std::to_string(timeout.count()) + " ms: " + e.what());
  } catch (const StoreError& e) {
    throw CommError(where + "claiming the group's store prefix failed: " + e.what());
  }
}

}  // namespace ddl
