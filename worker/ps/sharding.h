// Which parameter server holds which tensor. Pure and torch-free, so trainers and servers that
// compute it from the same tensor sizes agree without talking.
#pragma once

#include <cstdint>
#include <vector>

namespace ddl::ps {

// Assigns every tensor (given by its element count, in the model's parameter order) to one of
// `servers` servers, whole tensors only, balancing the elements each server holds: tensors are
// taken largest first (ties in parameter order) and each goes to the server holding the fewest
// elements so far (ties: the lowest index). Returns the server index of every tensor. A server may
// hold nothing when there are more servers than tensors. Throws std::invalid_argument for
// servers < 1 or a negative size.
std::vector<int> assign_shards(const std::vector<std::int64_t>& sizes, int servers);

// The tensor indices (in parameter order) that `assignment` gives to `server`.
std::vector<int> shard_of(const std::vector<int>& assignment, int server);

// Elements per server under `assignment` (for logs and the balance test).
std::vector<std::int64_t> shard_sizes(const std::vector<std::int64_t>& sizes,
                                      const std::vector<int>& assignment, int servers);

}  // namespace ddl::ps
