// What the benchmark programs share: the check of the start-up all-reduce and the way they end,
// each failure of the runtime as one line on stderr naming the program and the layer that failed.
#pragma once

#include <exception>
#include <iostream>

#include "env/contract.h"
#include "worker/comm/comm_error.h"
#include "worker/runtime/rendezvous.h"
#include "store/store.h"

namespace ddl::bench {

// 0 when an all-reduce (sum) of ones gave the world size, else 1 with a line saying what it gave.
inline int check_sum_of_ones(const char* program, const ParallelEnv& env, float seen) {
  if (seen == static_cast<float>(env.world_size)) return 0;
  std::cerr << program << ": rank " << env.rank << " of " << env.world_size
            << ": all_reduce of ones gave " << seen << ", expected " << env.world_size << std::endl;
  return 1;
}

// Runs `body` and returns its exit code; an environment, store, collective or other error is
// reported and returns 5.
template <typename Body>
int run_reporting(const char* program, Body&& body) {
  try {
    return body();
  } catch (const env::EnvError& e) {
    std::cerr << program << ": environment: " << e.what() << std::endl;
  } catch (const StoreError& e) {
    std::cerr << program << ": rendezvous store: " << e.what() << std::endl;
  } catch (const CommError& e) {
    std::cerr << program << ": collective: " << e.what() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << std::endl;
  }
  return 5;
}

}  // namespace ddl::bench
