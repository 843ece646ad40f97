// One start of a job's processes. The job's first start is generation 0; each restart
// (--max_restarts) begins the next. A generation is its own rendezvous: its processes get
// DDL_RESTART_COUNT=<index> and the job id "<job id>-g<index>", so the store refuses a late
// client of an earlier generation instead of mixing it in. This type is the only place that id is
// derived.
#pragma once

#include <string>

namespace ddl::launcher {

class Generation {
 public:
  // The first start.
  Generation() = default;
  // Start number `index` (0, 1, ...). Throws std::invalid_argument for a negative index.
  explicit Generation(int index);

  int index() const { return index_; }
  bool first() const { return index_ == 0; }
  Generation next() const { return Generation(index_ + 1); }

  // "<job_id>-g<index>": the job id this generation's processes are given.
  std::string job_id(const std::string& job_id) const;

  bool operator==(const Generation& o) const { return index_ == o.index_; }
  bool operator!=(const Generation& o) const { return index_ != o.index_; }

 private:
  int index_ = 0;
};

}  // namespace ddl::launcher
