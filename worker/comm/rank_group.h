// Sub-groups: a communicator over some of a job's ranks (e.g. the trainers of a parameter-server
// job all-reducing without the servers). No LibTorch; the Gloo mesh (worker/comm/gloo_mesh.h) and
// the NCCL communicator (worker/comm/nccl_communicator.h) both build their groups from it.
//
// Only the members build a group; the other ranks of the job call nothing. Inside the group the
// members are renumbered 0..k-1 in the order of `RankGroup::ranks`, and every rank argument of
// the group's communicator (a broadcast root, a send's destination) is such a group rank.
//
// Store keys: a group's keys live under "<job prefix>/group/<label>", where the job prefix is the
// backend's own (GlooOptions::store_prefix, NcclOptions::store_prefix) and the label is the
// group's name, or one made from the rank list when the name is empty. The world mesh's keys are
// "<job prefix>/<key>" with keys of the backend's own making, none of which starts with
// "group/", so a group never meets the world's keys nor those of a group with another label.
#pragma once

#include <string>
#include <vector>

#include "store/store.h"

namespace ddl {

struct RankGroup {
  // The members as job ranks; group rank i is job rank ranks[i]. Not empty, no duplicates, each
  // within [0, job world size).
  std::vector<int> ranks;
  // Tells apart two groups over the same ranks. Empty: the label is made from `ranks`. Must not
  // contain '/'.
  std::string name;
};

// Where this job rank sits in a group.
struct GroupPlace {
  int rank = 0;              // group rank: the index of the job rank in RankGroup::ranks
  int size = 1;              // RankGroup::ranks.size()
  int job_rank = 0;          // the rank in the whole job
  std::string label;         // RankGroup::name, or the one made from the rank list
  std::string store_prefix;  // "<job prefix>/group/<label>"
  std::string ranks_text;    // the rank list as "1,2,3", for messages and the agreement check
};

// Checks `group` against the job and returns this rank's place in it. Throws CommError
// ("<backend> group on job rank R of N: ...") when the list is empty, has a duplicate or a rank
// outside [0, job_size), does not hold `job_rank`, or the name holds a '/'.
GroupPlace place_in_group(const std::string& backend, int job_rank, int job_size,
                          const RankGroup& group, const std::string& job_prefix);

// Every member calls this once, before building the group's connections, with the same
// `timeout` it builds them with. It claims the group's prefix in `store` and checks that all
// members were given the same rank list. Throws CommError when the prefix was claimed before (a
// second group with the same label: give it another name), when group rank 0 listed other ranks
// than this rank did, or when group rank 0 did not publish its list within `timeout`.
// Thread-safe when `store` is.
void claim_group(Store& store, const GroupPlace& place, const std::string& backend,
                 std::chrono::milliseconds timeout);

}  // namespace ddl
