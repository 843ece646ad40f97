// What every collective throws, without LibTorch, so the torch-free Gloo mesh
// (worker/comm/gloo_mesh.h) and the tensor communicators (worker/comm/communicator.h) share it.
#pragma once

#include <string>

#include "env/error.h"

namespace ddl {

// A failed collective. The message names the backend, the operation and the rank, e.g.
// "gloo all_reduce on rank 1 of 2: peer 0 closed the connection".
// A program ends with kExitParallel for it ("collective: ...").
class CommError : public Error {
 public:
  explicit CommError(const std::string& what) : CommError(kExitParallel, what) {}

 protected:
  CommError(int exit_code, const std::string& what) : Error(exit_code, "collective", what) {}
};

// A collective that did not complete within its deadline (the peer is alive but silent, or
// stuck): programs exit with kExitDeadline for it, so the launcher dumps the stacks of the ranks
// still running.
class CommTimeout : public CommError {
 public:
  explicit CommTimeout(const std::string& what) : CommError(kExitDeadline, what) {}
};

}  // namespace ddl
