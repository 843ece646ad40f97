// The exit codes of `launch` and of the programs it runs, in one table: they are part of the
// contract between them. `launch` passes a worker's code on as its own and reads two of them: at
// kExitDeadline from a worker it dumps the stacks of the processes still running before it stops
// them (launcher/diagnose/), and it says when a kExitUsage is a worker's own.
//
//   code   name                launch                                workers (examples/)
//   0      kExitOk             every worker of the last generation   done
//                              exited 0
//   1      kExitError          any other error (spawn failure, ...)  training failed, other error
//   2      kExitUsage          bad command line or plan; a multi-    bad options (a world size the
//                              node job that cannot form             program cannot run included)
//   3      kExitBadData        -                                     data missing or malformed
//   4      kExitBadCheckpoint  -                                     checkpoint not readable or
//                                                                    writable
//   5      kExitParallel       -                                     environment, rendezvous,
//                                                                    collective or PS failure
//   93     kExitNoProgress     --no_progress_restarts: restarts kept -
//                              failing without passing the last
//                              checkpoint (do not requeue as is)
//   124    kExitDeadline       the hang guard fired, or a worker's   a rendezvous or collective
//                              124 passed on                         deadline passed
//   127    kExitNotFound       WORKER is not an executable           -
//   128+N  -                   interrupted by signal N, or a worker  -
//                              killed by it
//
// 124 and 127 are timeout(1)'s and the shell's numbers for the same events.
#pragma once

namespace ddl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBadData = 3;
inline constexpr int kExitBadCheckpoint = 4;
inline constexpr int kExitParallel = 5;
inline constexpr int kExitNoProgress = 93;
inline constexpr int kExitDeadline = 124;
inline constexpr int kExitNotFound = 127;

}  // namespace ddl
