// What every collective throws, without LibTorch, so the torch-free Gloo mesh
// (worker/comm/gloo_mesh.h) and the tensor communicators (worker/comm/communicator.h) share it.
#pragma once

#include <stdexcept>

namespace ddl {

// A failed collective. The message names the backend, the operation and the rank, e.g.
// "gloo all_reduce on rank 1 of 2: peer 0 closed the connection".
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective that did not complete within its deadline (the peer is alive but silent, or
// stuck): programs exit with env::kDeadlineExitCode for it, so the launcher dumps the stacks of
// the ranks still running.
class CommTimeout : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace ddl
