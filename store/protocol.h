// The store's ops on the framed transport (net/frame.h, service kStore). Private to store/.
//
// Request payloads (client -> server):
//   set          str key, str value                    -> ok
//   get          str key, u64 timeout ms               -> value | timeout
//   add          str key, i64 delta                    -> integer | (transport) error
//   check        u32 n, n x str key                    -> bool
//   wait         u32 n, n x str key, u64 timeout ms    -> ok | timeout
//   compare-set  str key, u8 has expected, [str expected], str desired -> value | absent
//   delete       str key                               -> bool
//   multi-set    u32 n, n x (str key, str value)       -> ok
//   multi-get    u32 n, n x str key, u64 timeout ms    -> values | timeout
// Reply payloads: ok, absent (empty); value (str); integer (i64); bool (u8 0|1);
// values (u32 n, n x str value, in the order of the request's keys);
// timeout (u32 n, n x str missing key).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "net/frame.h"

namespace ddl::store_protocol {

enum class Op : std::uint8_t {
  kSet = net::kFirstServiceOp,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kCompareSet,
  kDelete,
  kMultiSet,
  kMultiGet,
  // Replies.
  kOk = 64,
  kValue,
  kInteger,
  kBool,
  kTimeout,
  kAbsent,
  kValues,
};

inline std::uint8_t byte(Op op) { return static_cast<std::uint8_t>(op); }

// A list of keys on the wire: u32 n, then n strings.
inline std::vector<std::string> read_keys(net::PayloadReader& r) {
  const std::uint32_t n = r.u32();
  std::vector<std::string> keys;
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.str());
  return keys;
}

inline void write_keys(net::PayloadWriter& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
}

inline std::string op_name(std::uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::kSet: return "set";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kCheck: return "check";
    case Op::kWait: return "wait";
    case Op::kCompareSet: return "compare-set";
    case Op::kDelete: return "delete";
    case Op::kMultiSet: return "multi-set";
    case Op::kMultiGet: return "multi-get";
    case Op::kOk: return "ok";
    case Op::kValue: return "value";
    case Op::kInteger: return "integer";
    case Op::kBool: return "bool";
    case Op::kTimeout: return "timeout";
    case Op::kAbsent: return "absent";
    case Op::kValues: return "values";
  }
  return net::transport_op_name(op);
}

}  // namespace ddl::store_protocol
