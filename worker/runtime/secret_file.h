// The store secret of ranks a scheduler started on one machine without `launch` (`mpirun -np 4
// prog`, `srun -N1 -n4 prog`) and without DDL_JOB_SECRET: every rank reads it from one file that
// only the job's user can read, so no other local user can join the rank-0 store on loopback.
//
// The file is FOLDER/ddl-<uid>/<job id>.secret, FOLDER being /run/user/<uid> when the system made
// it (a tmpfs only this user can enter), else /tmp. The private folder is created with mode 0700
// and must be a real folder owned by this user with no access for others; the file is written
// under a temporary name with mode 0600 and published with link(2), so the first rank's secret
// wins and no rank reads half of one. A link, another owner or group/other access at either
// place is refused (someone planted it), never followed or used.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ddl {

struct SharedSecret {
  std::string secret;
  std::filesystem::path path;  // the file, for messages and for removing it once all joined
};

// /run/user/<uid> when it is a folder owned by this user with mode 0700, else /tmp.
std::filesystem::path default_secret_folder();

// The job's shared secret under `folder` (see above), made by whichever rank comes first.
// Throws env::EnvError naming the path when a planted or unsafe folder or file is found.
// std::nullopt, with `why_not` set, when no private file can be made here at all (a read-only
// or full folder): the caller then runs without a secret and says so.
std::optional<SharedSecret> shared_secret(const std::filesystem::path& folder,
                                          const std::string& job_id, std::string& why_not);

}  // namespace ddl
