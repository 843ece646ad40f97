#include "launcher/coord/records.h"

#include <map>
#include <nlohmann/json.hpp>

namespace ddl::launcher {

namespace {

using nlohmann::json;

constexpr std::size_t kQuotedChars = 120;

constexpr unsigned long long kMaxLongLong = 9223372036854775807ULL;

constexpr const char* kDescriptionKind = "job description";
constexpr const char* kEndpointsKind = "endpoints";
constexpr const char* kJobIdKind = "job id";
constexpr const char* kJobSecretKind = "job secret";
constexpr const char* kFailureKind = "failure";
constexpr const char* kMembersKind = "members";
constexpr const char* kSuccessKind = "generation succeeded";
constexpr const char* kPresentationKind = "node";

// Reads one record of kind `kind`; every problem becomes a RecordError with the context.
class Reader {
 public:
  Reader(const std::string& text, const char* kind, std::string_view source)
      : text_(text), kind_(kind), source_(source) {
    record_ = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (record_.is_discarded()) fail("not JSON");
    if (!record_.is_object()) fail("not a JSON object");
    const auto it = record_.find("record");
    if (it == record_.end() || !it->is_string()) fail("no \"record\" field naming its kind");
    if (it->get<std::string>() != kind_) {
      fail("a \"" + it->get<std::string>() + "\" record where a \"" + kind_ + "\" one belongs");
    }
  }

  const json& field(const char* name, json::value_t type, const char* type_name) const {
    const auto it = record_.find(name);
    if (it == record_.end()) fail(std::string("field \"") + name + "\" is missing");
    const bool ok = it->type() == type || (type == json::value_t::number_integer &&
                                           it->type() == json::value_t::number_unsigned);
    if (!ok) fail(std::string("field \"") + name + "\" is not " + type_name);
    return *it;
  }

  bool has(const char* name) const { return record_.contains(name); }

  std::string string(const char* name) const {
    return field(name, json::value_t::string, "a string").get<std::string>();
  }

  int integer(const char* name, long long min, long long max) const {
    const json& v = field(name, json::value_t::number_integer, "an integer");
    if (v.is_number_unsigned() && v.get<unsigned long long>() > kMaxLongLong) {
      fail(std::string("field \"") + name + "\" is out of range");
    }
    const long long n = v.get<long long>();
    if (n < min || n > max) {
      fail(std::string("field \"") + name + "\" is " + std::to_string(n) + ", expected " +
           std::to_string(min) + ".." + std::to_string(max));
    }
    return static_cast<int>(n);
  }

  const json& array(const char* name) const {
    return field(name, json::value_t::array, "an array");
  }

  [[noreturn]] void fail(const std::string& why) const {
    std::string seen = text_.substr(0, kQuotedChars);
    if (text_.size() > kQuotedChars) seen += "...";
    throw RecordError("malformed " + std::string(kind_) + " record from " + std::string(source_) +
                      ": " + why + "; got '" + seen + "'");
  }

 private:
  const std::string& text_;
  const char* kind_;
  std::string_view source_;
  json record_;
};

constexpr long long kMaxInt = 2147483647;

// Compact JSON; text that is not valid UTF-8 (a message quoting a worker) gets U+FFFD.
std::string to_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string encode_description(const JobDescription& d) {
  json fields = json::array();
  for (const auto& [name, value] : d) fields.push_back(json::array({name, value}));
  return to_text(json{{"record", kDescriptionKind}, {"fields", fields}});
}

JobDescription decode_description(const std::string& text, std::string_view source) {
  const Reader r(text, kDescriptionKind, source);
  JobDescription d;
  for (const json& pair : r.array("fields")) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      r.fail("an entry of \"fields\" is not a [name, value] pair of strings");
    }
    d.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  }
  return d;
}

std::optional<std::string> description_mismatch(const JobDescription& mine, int my_node,
                                                const JobDescription& theirs, int their_node) {
  std::map<std::string, std::string> other(theirs.begin(), theirs.end());
  auto differs = [&](const std::string& name, const std::string& here, const std::string& there) {
    return "the job description differs between nodes: " + name + " is '" + here + "' on node " +
           std::to_string(my_node) + " (this node) but '" + there + "' on node " +
           std::to_string(their_node);
  };
  for (const auto& [name, value] : mine) {
    auto it = other.find(name);
    const std::string there = it == other.end() ? std::string("<not given>") : it->second;
    if (there != value) return differs(name, value, there);
    other.erase(name);
  }
  if (!other.empty()) return differs(other.begin()->first, "<not given>", other.begin()->second);
  return std::nullopt;
}

std::string encode_endpoints(const std::vector<env::Endpoint>& endpoints) {
  json list = json::array();
  for (const env::Endpoint& e : endpoints) list.push_back(e.str());
  return to_text(json{{"record", kEndpointsKind}, {"endpoints", list}});
}

std::vector<env::Endpoint> decode_endpoints(const std::string& text, std::string_view source) {
  const Reader r(text, kEndpointsKind, source);
  std::vector<env::Endpoint> out;
  for (const json& e : r.array("endpoints")) {
    if (!e.is_string()) r.fail("an entry of \"endpoints\" is not a string");
    try {
      out.push_back(env::parse_endpoint(e.get<std::string>(), "endpoint"));
    } catch (const env::EnvError& error) {
      r.fail(error.what());
    }
  }
  if (out.empty()) r.fail("\"endpoints\" is empty");
  return out;
}

std::string encode_job_id(const std::string& job_id) {
  return to_text(json{{"record", kJobIdKind}, {"job_id", job_id}});
}

std::string decode_job_id(const std::string& text, std::string_view source) {
  const Reader r(text, kJobIdKind, source);
  std::string id = r.string("job_id");
  if (id.empty()) r.fail("\"job_id\" is empty");
  return id;
}

std::string encode_job_secret(const std::string& secret) {
  return to_text(json{{"record", kJobSecretKind}, {"job_secret", secret}});
}

std::string decode_job_secret(const std::string& text, std::string_view source) {
  const Reader r(text, kJobSecretKind, source);
  std::string secret = r.string("job_secret");
  if (secret.empty()) r.fail("\"job_secret\" is empty");
  return secret;
}

std::string FailureRecord::str() const {
  std::string out = "node " + std::to_string(node);
  if (rank) out += " rank " + std::to_string(*rank);
  return out + " exit " + std::to_string(exit_code) + ": " + what;
}

std::string encode_failure(const FailureRecord& record) {
  json j{{"record", kFailureKind},
         {"node", record.node},
         {"exit_code", record.exit_code},
         {"what", record.what}};
  if (record.rank) j["rank"] = *record.rank;
  return to_text(j);
}

FailureRecord decode_failure(const std::string& text, std::string_view source) {
  const Reader r(text, kFailureKind, source);
  FailureRecord f;
  f.node = r.integer("node", 0, kMaxInt);
  if (r.has("rank")) f.rank = r.integer("rank", 0, kMaxInt);
  f.exit_code = r.integer("exit_code", 0, 255);
  f.what = r.string("what");
  return f;
}

std::string encode_generation_success(int generation) {
  return to_text(json{{"record", kSuccessKind}, {"generation", generation}});
}

std::optional<FailureRecord> decode_generation_end(const std::string& text, int generation,
                                                   std::string_view source) {
  const json peek = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!peek.is_object() || peek.value("record", json()) != kSuccessKind) {
    return decode_failure(text, source);
  }
  const Reader r(text, kSuccessKind, source);
  const int said = r.integer("generation", 0, kMaxInt);
  if (said != generation) {
    r.fail("it names generation " + std::to_string(said) + ", not " + std::to_string(generation));
  }
  return std::nullopt;
}

std::string encode_members(const Members& members) {
  json endpoints = json::array();
  for (const auto& node : members.endpoints) {
    json list = json::array();
    for (const env::Endpoint& e : node) list.push_back(e.str());
    endpoints.push_back(list);
  }
  json record{{"record", kMembersKind},
              {"generation", members.generation},
              {"nodes", members.nodes},
              {"endpoints", endpoints}};
  if (!members.launchers.empty()) record["launchers"] = members.launchers;
  return to_text(record);
}

Members decode_members(const std::string& text, std::string_view source) {
  const Reader r(text, kMembersKind, source);
  Members m;
  m.generation = r.integer("generation", 0, kMaxInt);
  const json& nodes = r.array("nodes");
  if (nodes.empty()) r.fail("\"nodes\" is empty");
  for (const json& n : nodes) {
    if (!n.is_number_integer() || n.get<long long>() < 0 || n.get<long long>() > kMaxInt) {
      r.fail("\"nodes\" holds something that is not a node number");
    }
    const int node = n.get<int>();
    if (!m.nodes.empty() && node <= m.nodes.back()) r.fail("\"nodes\" is not strictly ascending");
    m.nodes.push_back(node);
  }
  const json& endpoints = r.array("endpoints");
  if (endpoints.size() != m.nodes.size()) {
    r.fail("\"endpoints\" holds " + std::to_string(endpoints.size()) + " list(s) for " +
           std::to_string(m.nodes.size()) + " node(s)");
  }
  for (const json& list : endpoints) {
    if (!list.is_array() || list.empty())
      r.fail("an entry of \"endpoints\" is not a non-empty list");
    std::vector<env::Endpoint> node;
    for (const json& e : list) {
      if (!e.is_string()) r.fail("an entry of \"endpoints\" holds something that is not a string");
      try {
        node.push_back(env::parse_endpoint(e.get<std::string>(), "endpoint"));
      } catch (const env::EnvError& error) {
        r.fail(error.what());
      }
    }
    m.endpoints.push_back(std::move(node));
  }
  if (r.has("launchers")) {
    const json& launchers = r.array("launchers");
    if (launchers.size() != m.nodes.size()) r.fail("\"launchers\" does not match \"nodes\"");
    for (const json& l : launchers) {
      if (!l.is_string()) r.fail("an entry of \"launchers\" is not a string");
      m.launchers.push_back(l.get<std::string>());
    }
  }
  return m;
}

std::string encode_presentation(const Presentation& p) {
  return to_text(json{{"record", kPresentationKind},
                      {"description", encode_description(p.description)},
                      {"endpoints", encode_endpoints(p.endpoints)},
                      {"job_id", p.job_id},
                      {"job_secret", p.job_secret}});
}

Presentation decode_presentation(const std::string& text, std::string_view source) {
  const Reader r(text, kPresentationKind, source);
  Presentation p;
  p.description = decode_description(r.string("description"), source);
  p.endpoints = decode_endpoints(r.string("endpoints"), source);
  p.job_id = r.string("job_id");
  p.job_secret = r.string("job_secret");
  return p;
}

}  // namespace ddl::launcher
