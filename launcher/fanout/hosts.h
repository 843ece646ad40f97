// The hosts of a job started from one terminal (launcher/fanout/fanout.h), as DeepSpeed and
// horovodrun users write them:
// - a host file (`--hostfile`, DeepSpeed's and MPI's format): one host per line, `HOST slots=N`
//   (`HOST` alone is one slot), `#` starts a comment, blank lines are skipped; anything else is an
//   error naming the file and the line;
// - a host list (`--hosts`, horovodrun's `-H`): `h1:4,h2:4` (`h1` alone is one slot);
// - `--include` / `--exclude`, DeepSpeed's spelling: hosts separated by `@`, each optionally with
//   `:` and a comma list of slots (`worker-1:0,2@worker-2`); include keeps only what it names (a
//   host without slots: all of them), exclude removes it;
// - `--num_nodes N` keeps the first N hosts, `--num_gpus N` the first N slots of each.
// A slot is a device index on its host (0..slots-1). Every host name is checked by
// env::check_host; a host listed twice, a slot out of range, an include or exclude naming a host
// not in the list, or nothing left is an OptionsError.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddl::launcher::fanout {

struct HostSlots {
  std::string host;
  std::vector<int> slots;  // device indices on the host, ascending
  // True when --include named the slots (they become the host's --selected_gpus); false when
  // only their number counts (--nproc_per_node).
  bool chosen = false;
};

// The lines of a host file's text; `file` names it in errors.
std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& file);
// horovodrun's `h1:4,h2:4`.
std::vector<HostSlots> parse_host_list(const std::string& list);

struct Selection {
  std::optional<std::string> include;
  std::optional<std::string> exclude;
  std::optional<int> num_nodes;
  std::optional<int> num_gpus;
};
// `hosts` narrowed by `selection` (see above).
std::vector<HostSlots> select_hosts(std::vector<HostSlots> hosts, const Selection& selection);

}  // namespace ddl::launcher::fanout
