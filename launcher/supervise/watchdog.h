// A helper process that outlives a SIGKILLed launcher just long enough to SIGKILL the workers'
// process groups. PR_SET_PDEATHSIG only reaches the workers themselves; their children (data
// loaders, shells) would survive. The launcher tells the watchdog each group id over a pipe only
// it holds (and, after a restart, which groups are over); EOF without the "done" mark means the
// launcher died, and the watchdog then SIGKILLs every group it still guards.
//
// When the pipe or the fork fails, the job runs without a watchdog (a warning says so). Move-only;
// one per job, owned by the supervisor's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace ddl::launcher {

class Watchdog {
 public:
  Watchdog();  // forks the watchdog process
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  Watchdog(Watchdog&& o) noexcept;
  Watchdog& operator=(Watchdog&&) = delete;

  // Stops the watchdog without it killing anything (the job is over); waits at most 1 s for it.
  ~Watchdog();

  // `group` is to be SIGKILLed if the launcher dies.
  void guard(pid_t group);

  // `group` is over (reaped and SIGKILLed); its id may be reused by an unrelated process.
  void release(pid_t group);

 private:
  void tell(std::int32_t value);
  bool send(std::int32_t value);

  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace ddl::launcher
