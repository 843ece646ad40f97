#include "launcher/coord/etcd_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

namespace ddl::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// --- base64 (the gateway's encoding of bytes) ------------------------------------------------

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;  // also the URL-safe alphabet
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  out.reserve(text.size() / 4 * 3);
  unsigned acc = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') break;
    const int d = base64_digit(c);
    if (d < 0) throw EtcdError("reply holds invalid base64 text '" + text + "'");
    acc = (acc << 6) | static_cast<unsigned>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// The end of the range of keys that start with `prefix` (etcd's convention): the prefix with its
// last byte below 0xff incremented and what follows dropped; "\0" (every key from `prefix` on)
// when there is none.
std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    const auto last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// The range of `key` (a prefix when `prefix`) as the gateway's key/range_end fields.
void set_range(json& request, const std::string& key, bool prefix) {
  if (prefix && key.empty()) {
    request["key"] = base64_encode(std::string(1, '\0'));
    request["range_end"] = base64_encode(std::string(1, '\0'));
    return;
  }
  request["key"] = base64_encode(key);
  if (prefix) request["range_end"] = base64_encode(prefix_end(key));
}

// int64 fields travel as strings; a field equal to 0 is left out.
std::int64_t int64_field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    try {
      std::size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception&) {
      throw EtcdError("reply field '" + std::string(name) + "' is not an integer: '" + s + "'");
    }
  }
  if (it->is_number_integer()) return it->get<std::int64_t>();
  throw EtcdError("reply field '" + std::string(name) + "' is not an integer: " + it->dump());
}

std::string bytes_field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return "";
  if (!it->is_string()) {
    throw EtcdError("reply field '" + std::string(name) + "' is not base64 text: " + it->dump());
  }
  return base64_decode(it->get<std::string>());
}

const json& object_field(const json& object, const char* name) {
  static const json empty = json::object();
  const auto it = object.find(name);
  return it == object.end() || !it->is_object() ? empty : *it;
}

KeyValue key_value_of(const json& kv) {
  KeyValue out;
  out.key = bytes_field(kv, "key");
  out.value = bytes_field(kv, "value");
  out.create_revision = int64_field(kv, "create_revision");
  out.mod_revision = int64_field(kv, "mod_revision");
  out.version = int64_field(kv, "version");
  return out;
}

std::vector<KeyValue> kvs_of(const json& reply) {
  std::vector<KeyValue> out;
  const auto it = reply.find("kvs");
  if (it == reply.end() || !it->is_array()) return out;
  for (const auto& kv : *it) out.push_back(key_value_of(kv));
  return out;
}

std::int64_t header_revision(const json& reply) {
  return int64_field(object_field(reply, "header"), "revision");
}

json op_json(const Op& op) {
  json body = json::object();
  switch (op.kind) {
    case Op::Kind::kPut:
      body["key"] = base64_encode(op.key);
      body["value"] = base64_encode(op.value);
      return json{{"request_put", body}};
    case Op::Kind::kRange:
      set_range(body, op.key, op.prefix);
      return json{{"request_range", body}};
    case Op::Kind::kDelete:
      set_range(body, op.key, op.prefix);
      return json{{"request_delete_range", body}};
  }
  throw EtcdError("unknown transaction operation");
}

json compare_json(const Compare& c) {
  json body = json::object();
  body["key"] = base64_encode(c.key);
  switch (c.result) {
    case Compare::Result::kEqual:
      body["result"] = "EQUAL";
      break;
    case Compare::Result::kNotEqual:
      body["result"] = "NOT_EQUAL";
      break;
    case Compare::Result::kGreater:
      body["result"] = "GREATER";
      break;
    case Compare::Result::kLess:
      body["result"] = "LESS";
      break;
  }
  switch (c.target) {
    case Compare::Target::kVersion:
      body["target"] = "VERSION";
      body["version"] = std::to_string(c.number);
      break;
    case Compare::Target::kCreateRevision:
      body["target"] = "CREATE";
      body["create_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kModRevision:
      body["target"] = "MOD";
      body["mod_revision"] = std::to_string(c.number);
      break;
    case Compare::Target::kValue:
      body["target"] = "VALUE";
      body["value"] = base64_encode(c.value);
      break;
  }
  return body;
}

// gRPC's UNAVAILABLE: the member answers but cannot serve now (no leader, stopping); another
// member may.
constexpr int kGrpcUnavailable = 14;
constexpr int kGrpcUnauthenticated = 16;  // etcd: an auth token that expired or is unknown

// A failure of one member (it did not answer, or answered that it cannot serve): the request
// goes to the next.
struct MemberFailure {
  std::string reason;
  bool answered = false;  // it replied (unavailable), so it may serve again shortly
};

// An error reply the request fails with ({"error", "code", "message"}; streamed replies carry
// {"error": {"grpc_code", "message", ...}}).
struct ErrorReply {
  int code = 0;
  std::string message;
};

std::optional<ErrorReply> error_of(const json& reply) {
  const auto it = reply.find("error");
  if (it == reply.end() || it->is_null()) return std::nullopt;
  ErrorReply e;
  if (it->is_object()) {
    e.code = static_cast<int>(int64_field(*it, "grpc_code"));
    e.message = it->value("message", it->dump());
  } else {
    e.code = static_cast<int>(int64_field(reply, "code"));
    e.message = reply.value("message", it->is_string() ? it->get<std::string>() : it->dump());
  }
  return e;
}

// Complete JSON objects at the front of `pending` (a stream of them, separated by white space),
// removed from it; an incomplete one stays for the next read.
std::vector<std::string> take_objects(std::string& pending) {
  std::vector<std::string> out;
  std::size_t start = std::string::npos;
  std::size_t consumed = 0;
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const char c = pending[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      if (depth++ == 0) start = i;
    } else if (c == '}') {
      if (--depth == 0) {
        out.push_back(pending.substr(start, i + 1 - start));
        consumed = i + 1;
      }
    }
  }
  pending.erase(0, consumed);
  return out;
}

}  // namespace

// --- Compare, Op -----------------------------------------------------------------------------

Compare Compare::absent(std::string key) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kVersion;
  c.result = Result::kEqual;
  c.number = 0;
  return c;
}

Compare Compare::value_is(std::string key, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.result = Result::kEqual;
  c.value = std::move(value);
  return c;
}

Compare Compare::mod_revision_is(std::string key, std::int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kModRevision;
  c.result = Result::kEqual;
  c.number = revision;
  return c;
}

Op Op::put(std::string key, std::string value) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  return op;
}

Op Op::get(std::string key) {
  Op op;
  op.kind = Kind::kRange;
  op.key = std::move(key);
  return op;
}

Op Op::get_prefix(std::string prefix) {
  Op op = get(std::move(prefix));
  op.prefix = true;
  return op;
}

Op Op::erase(std::string key) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(key);
  return op;
}

Op Op::erase_prefix(std::string prefix) {
  Op op = erase(std::move(prefix));
  op.prefix = true;
  return op;
}

// --- Impl: connections and requests ------------------------------------------------------------

// One connection to a member: plain TCP, or TLS over it (ClientOptions::tls).
class Stream {
 public:
  Stream(asio::io_context& ioc, asio::ssl::context* tls) {
    if (tls) {
      tls_.emplace(ioc, *tls);
    } else {
      plain_.emplace(ioc);
    }
  }
  beast::tcp_stream& tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }
  beast::ssl_stream<beast::tcp_stream>* tls() { return tls_ ? &*tls_ : nullptr; }
  // Calls `f` with the stream HTTP is spoken on.
  template <typename F>
  auto with(F&& f) {
    if (tls_) return f(*tls_);
    return f(*plain_);
  }
  void close() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().close();
  }

 private:
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
};

// The TLS context of ClientOptions::tls: the CA that signs the members' certificates (else the
// system's), and this client's certificate and key when the members ask for one. Throws
// EtcdError naming the file that cannot be used.
std::unique_ptr<asio::ssl::context> tls_context(const TlsOptions& tls) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  auto use = [](const std::string& what, const std::string& file, auto&& load) {
    beast::error_code ec;
    load(ec);
    if (ec) throw EtcdError("cannot use " + what + " '" + file + "': " + ec.message());
  };
  ctx->set_verify_mode(asio::ssl::verify_peer);
  if (!tls.ca_file.empty()) {
    use("the CA certificate", tls.ca_file,
        [&](beast::error_code& ec) { ctx->load_verify_file(tls.ca_file, ec); });
  } else {
    ctx->set_default_verify_paths();
  }
  if (!tls.cert_file.empty()) {
    use("the client certificate", tls.cert_file,
        [&](beast::error_code& ec) { ctx->use_certificate_chain_file(tls.cert_file, ec); });
    use("the client key", tls.key_file, [&](beast::error_code& ec) {
      ctx->use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
    });
  }
  return ctx;
}

struct Client::Impl {
  explicit Impl(const ClientOptions& o)
      : options(o), tls(o.tls.enabled ? tls_context(o.tls) : nullptr) {
    stream = std::make_unique<Stream>(ioc, tls.get());
  }

  ClientOptions options;
  asio::io_context ioc;
  std::unique_ptr<asio::ssl::context> tls;
  // The kept-alive connection of requests, to options.endpoints[current] when `connected`.
  std::unique_ptr<Stream> stream;
  beast::flat_buffer buffer;
  bool connected = false;
  std::size_t current = 0;
  std::string token;  // etcd's auth token, once authenticated (ClientOptions::user)

  // Runs the asynchronous operation `start` begins (given a handler) to completion; the stream's
  // expiry bounds it.
  template <typename Start>
  beast::error_code run(Start&& start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  template <typename Start>
  beast::error_code run_sized(Start&& start, std::size_t& bytes) {
    beast::error_code result = asio::error::would_block;
    start([&result, &bytes](beast::error_code ec, std::size_t n) {
      result = ec;
      bytes = n;
    });
    ioc.restart();
    ioc.run();
    return result;
  }

  static std::string reason_of(const beast::error_code& ec) {
    if (ec == beast::error::timeout) return "no reply in time";
    return ec.message();
  }

  // Connects `s` to endpoint `index` (by the deadline set on it), with the TLS handshake when
  // the client speaks TLS. Throws MemberFailure.
  void connect(Stream& stream, std::size_t index) {
    beast::tcp_stream& s = stream.tcp();
    const env::Endpoint& e = options.endpoints[index];
    std::vector<tcp::endpoint> addresses;
    beast::error_code ec;
    const auto literal = asio::ip::make_address(e.host, ec);
    if (!ec) {
      addresses.emplace_back(literal, e.port);
    } else {
      tcp::resolver resolver(ioc);
      const auto found = resolver.resolve(e.host, std::to_string(e.port), ec);
      if (ec) throw MemberFailure{"cannot resolve " + e.host + ": " + ec.message()};
      for (const auto& r : found) addresses.push_back(r.endpoint());
    }
    ec = run([&](auto handler) { s.async_connect(addresses, std::move(handler)); });
    if (ec) throw MemberFailure{"cannot connect: " + reason_of(ec)};
    s.socket().set_option(tcp::no_delay(true), ec);
    if (auto* t = stream.tls()) {
      // The member's certificate must name the host this client was given.
      if (!SSL_set_tlsext_host_name(t->native_handle(), e.host.c_str())) {
        throw MemberFailure{"TLS: cannot set the server name " + e.host};
      }
      t->set_verify_callback(asio::ssl::host_name_verification(e.host));
      ec = run([&](auto handler) {
        t->async_handshake(asio::ssl::stream_base::client, std::move(handler));
      });
      // Not a member that is away: a certificate this client cannot trust, or no TLS there.
      if (ec) {
        throw EtcdError("TLS handshake with " + e.str() + " failed: " + reason_of(ec) +
                        " (is cacert= the CA that signed its certificate, and does it serve "
                        "https?)");
      }
    }
  }

  void disconnect() {
    stream->close();
    stream = std::make_unique<Stream>(ioc, tls.get());  // a TLS stream is not reused
    buffer.consume(buffer.size());
    connected = false;
  }

  http::request<http::string_body> request_of(const env::Endpoint& e, const std::string& target,
                                              const std::string& body) const {
    http::request<http::string_body> request{http::verb::post, target, 11};
    request.set(http::field::host, e.str());
    if (!token.empty()) request.set(http::field::authorization, token);
    request.set(http::field::content_type, "application/json");
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();
    return request;
  }

  // One request on the member `current`, on the open connection or a new one. Returns the
  // decoded reply; throws MemberFailure when the member did not answer (or cannot serve), and
  // EtcdError for an error reply or one that cannot be decoded.
  json exchange(const std::string& target, const std::string& body) {
    const env::Endpoint& e = options.endpoints[current];
    // A kept-alive connection may have been closed by the member meanwhile: a failure on it is
    // retried once on a new connection before the member counts as failed.
    for (int attempt = 0;; ++attempt) {
      const bool reused = connected;
      stream->tcp().expires_after(options.request_timeout);
      if (!connected) {
        connect(*stream, current);
        connected = true;
      }
      auto request = request_of(e, target, body);
      beast::error_code ec = stream->with([&](auto& st) {
        return run([&](auto handler) { http::async_write(st, request, std::move(handler)); });
      });
      http::response_parser<http::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      if (!ec) {
        ec = stream->with([&](auto& st) {
          return run(
              [&](auto handler) { http::async_read(st, buffer, parser, std::move(handler)); });
        });
      }
      if (ec) {
        disconnect();
        if (reused && attempt == 0 && ec != beast::error::timeout) continue;
        throw MemberFailure{reason_of(ec)};
      }
      stream->tcp().expires_never();
      auto response = parser.release();
      if (!response.keep_alive()) disconnect();
      json reply;
      try {
        reply = json::parse(response.body());
      } catch (const json::exception&) {
        throw EtcdError(e.str() + " answered " + target + " with HTTP " +
                        std::to_string(response.result_int()) + " and a body that is not JSON: '" +
                        response.body().substr(0, 200) + "'");
      }
      if (auto error = error_of(reply)) {
        if (error->code == kGrpcUnavailable) {
          throw MemberFailure{"unavailable: " + error->message, true};
        }
        throw ErrorReplyException{e.str() + " refused " + target + ": " + error->message +
                                      " (code " + std::to_string(error->code) + ")",
                                  error->code};
      }
      if (response.result() != http::status::ok) {
        throw EtcdError(e.str() + " answered " + target + " with HTTP " +
                        std::to_string(response.result_int()) + ": '" +
                        response.body().substr(0, 200) + "'");
      }
      return reply;
    }
  }

  // An error reply, with its gRPC code for the callers that accept some.
  struct ErrorReplyException : EtcdError {
    ErrorReplyException(const std::string& what, int c) : EtcdError(what), code(c) {}
    int code;
  };

  // Failover: `attempt` on each member in turn from the current one, until one answers. Members
  // that answered "unavailable" (an election in progress) are asked again, in rounds, while the
  // request's budget (one request_timeout per member) lasts.
  template <typename Attempt>
  auto with_failover(const std::string& what, Attempt&& attempt) {
    const std::size_t n = options.endpoints.size();
    const auto budget_end = Clock::now() + options.request_timeout * static_cast<int>(n);
    std::vector<std::string> tried;
    std::string last;
    while (true) {
      bool any_answered = false;
      for (std::size_t k = 0; k < n; ++k) {
        try {
          return attempt(current);
        } catch (const MemberFailure& f) {
          const std::string name = options.endpoints[current].str();
          if (std::find(tried.begin(), tried.end(), name) == tried.end()) tried.push_back(name);
          last = name + ": " + f.reason;
          any_answered = any_answered || f.answered;
          const std::size_t next = (current + 1) % n;
          if (n > 1) {
            spdlog::debug("etcd: {} failed at {} ({}); trying {}", what, name, f.reason,
                          options.endpoints[next].str());
          }
          disconnect();
          current = next;
        }
      }
      if (!any_answered || Clock::now() + std::chrono::milliseconds(100) >= budget_end) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::string names;
    for (const auto& t : tried) names += (names.empty() ? "" : ", ") + t;
    throw EtcdUnreachable("no etcd member answered " + what + " (tried " + names +
                          "); last: " + last);
  }

  json post(const std::string& target, const json& body) {
    const std::string text = body.dump();
    return with_failover("POST " + target, [&](std::size_t) {
      authenticate();
      try {
        return exchange(target, text);
      } catch (const ErrorReplyException& e) {
        // A token that expired (or a member that restarted): authenticate again, once.
        if (options.user.empty() || e.code != kGrpcUnauthenticated) throw;
        token.clear();
        authenticate();
        return exchange(target, text);
      }
    });
  }

  // With ClientOptions::user: gets an auth token from the current member unless there is one.
  void authenticate() {
    if (options.user.empty() || !token.empty()) return;
    json reply;
    try {
      reply = exchange("/v3/auth/authenticate",
                       json{{"name", options.user}, {"password", options.password}}.dump());
    } catch (const ErrorReplyException& e) {
      throw ErrorReplyException("etcd user '" + options.user + "': " + e.what(), e.code);
    }
    const auto it = reply.find("token");
    if (it == reply.end() || !it->is_string() || it->get<std::string>().empty()) {
      throw EtcdError(options.endpoints[current].str() + " answered the authentication of user '" +
                      options.user + "' without a token");
    }
    token = it->get<std::string>();
  }

  // --- watch: a streamed reply on a connection of its own -------------------------------------

  // One watch on member `index` (see Client::watch). `from_revision` is updated to the revision
  // the watch started from once the member confirmed it (so that another member resumes there).
  WatchResult watch_on(std::size_t index, const std::string& key, bool prefix,
                       std::int64_t& from_revision, Clock::time_point deadline) {
    const env::Endpoint& e = options.endpoints[index];
    authenticate();
    Stream s(ioc, tls.get());
    beast::flat_buffer b;
    struct Closer {
      Stream& s;
      ~Closer() { s.close(); }
    } closer{s};

    json create = json::object();
    set_range(create, key, prefix);
    if (from_revision > 0) create["start_revision"] = std::to_string(from_revision);
    const json body{{"create_request", create}};

    // Until the member confirmed the watch: one request_timeout.
    s.tcp().expires_after(options.request_timeout);
    connect(s, index);
    auto request = request_of(e, "/v3/watch", body.dump());
    beast::error_code ec = s.with([&](auto& st) {
      return run([&](auto handler) { http::async_write(st, request, std::move(handler)); });
    });
    if (ec) throw MemberFailure{"watch: " + reason_of(ec)};
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    ec = s.with([&](auto& st) {
      return run([&](auto handler) { http::async_read_header(st, b, parser, std::move(handler)); });
    });
    if (ec) throw MemberFailure{"watch: " + reason_of(ec)};
    if (parser.get().result() != http::status::ok) {
      throw EtcdError(e.str() + " answered /v3/watch with HTTP " +
                      std::to_string(parser.get().result_int()));
    }

    WatchResult result;
    result.next_revision = from_revision;
    bool created = false;
    std::string pending;
    char chunk[16 * 1024];
    while (true) {
      for (const std::string& text : take_objects(pending)) {
        json message;
        try {
          message = json::parse(text);
        } catch (const json::exception&) {
          throw EtcdError(e.str() + " sent a watch message that is not JSON: '" +
                          text.substr(0, 200) + "'");
        }
        if (auto error = error_of(message)) {
          if (error->code == kGrpcUnavailable) {
            throw MemberFailure{"watch unavailable: " + error->message, true};
          }
          throw EtcdError(e.str() + " refused the watch on '" + key + "': " + error->message +
                          " (code " + std::to_string(error->code) + ")");
        }
        const json& r = object_field(message, "result");
        if (r.value("created", false)) {
          created = true;
          if (from_revision <= 0) {
            // Watching "from now": from the revision after the member's current one.
            from_revision = header_revision(r) + 1;
            result.next_revision = from_revision;
          }
          s.tcp().expires_at(deadline);
        }
        if (r.value("canceled", false)) {
          const std::int64_t compacted = int64_field(r, "compact_revision");
          if (compacted > 0) {
            throw EtcdError(
                "watch on '" + key + "' from revision " + std::to_string(from_revision) +
                ": compacted away (the oldest revision kept is " + std::to_string(compacted) + ")");
          }
          throw EtcdError("watch on '" + key + "' canceled by " + e.str() + ": " +
                          r.value("cancel_reason", std::string("no reason given")));
        }
        const auto events = r.find("events");
        if (events != r.end() && events->is_array() && !events->empty()) {
          for (const auto& ev : *events) {
            WatchEvent event;
            event.type = ev.value("type", std::string("PUT")) == "DELETE"
                             ? WatchEvent::Type::kDelete
                             : WatchEvent::Type::kPut;
            event.kv = key_value_of(object_field(ev, "kv"));
            result.next_revision = std::max(result.next_revision, event.kv.mod_revision + 1);
            result.events.push_back(std::move(event));
          }
          return result;
        }
      }
      if (parser.is_done()) {
        if (!created) throw MemberFailure{"watch: the reply ended before the watch started"};
        throw MemberFailure{"watch: the member ended the stream"};
      }
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      std::size_t ignored_bytes = 0;
      ec = s.with([&](auto& st) {
        return run_sized(
            [&](auto handler) { http::async_read_some(st, b, parser, std::move(handler)); },
            ignored_bytes);
      });
      if (ec == http::error::need_buffer) ec = {};
      pending.append(chunk, sizeof chunk - parser.get().body().size);
      if (ec == beast::error::timeout && created) return result;  // no event in time
      if (ec) throw MemberFailure{"watch: " + reason_of(ec)};
    }
  }
};

// --- Client ----------------------------------------------------------------------------------

Client::Client(ClientOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw EtcdError("no etcd endpoints given");
  if (options_.request_timeout <= std::chrono::milliseconds(0)) {
    throw EtcdError("the etcd request timeout must be positive");
  }
  impl_ = std::make_unique<Impl>(options_);
}

Client::~Client() = default;

std::unique_ptr<Client> Client::clone() const { return std::make_unique<Client>(options_); }

std::string Client::endpoints_text() const {
  std::string out;
  for (const auto& e : options_.endpoints) out += (out.empty() ? "" : ", ") + e.str();
  return out;
}

std::optional<KeyValue> Client::get(const std::string& key) {
  json request = json::object();
  set_range(request, key, false);
  const json reply = impl_->post("/v3/kv/range", request);
  auto kvs = kvs_of(reply);
  if (kvs.empty()) return std::nullopt;
  return std::move(kvs.front());
}

RangeResult Client::get_prefix(const std::string& prefix) {
  json request = json::object();
  set_range(request, prefix, true);
  const json reply = impl_->post("/v3/kv/range", request);
  RangeResult out;
  out.kvs = kvs_of(reply);
  out.revision = header_revision(reply);
  return out;
}

std::int64_t Client::put(const std::string& key, const std::string& value) {
  json request{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  return header_revision(impl_->post("/v3/kv/put", request));
}

std::int64_t Client::erase(const std::string& key) {
  json request = json::object();
  set_range(request, key, false);
  return int64_field(impl_->post("/v3/kv/deleterange", request), "deleted");
}

std::int64_t Client::erase_prefix(const std::string& prefix) {
  json request = json::object();
  set_range(request, prefix, true);
  return int64_field(impl_->post("/v3/kv/deleterange", request), "deleted");
}

TxnResult Client::txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                      const std::vector<Op>& failure) {
  json request = json::object();
  request["compare"] = json::array();
  for (const auto& c : compares) request["compare"].push_back(compare_json(c));
  request["success"] = json::array();
  for (const auto& op : success) request["success"].push_back(op_json(op));
  request["failure"] = json::array();
  for (const auto& op : failure) request["failure"].push_back(op_json(op));
  const json reply = impl_->post("/v3/kv/txn", request);

  TxnResult out;
  out.succeeded = reply.value("succeeded", false);
  out.revision = header_revision(reply);
  const std::vector<Op>& ran = out.succeeded ? success : failure;
  const auto responses = reply.find("responses");
  const std::size_t count =
      responses != reply.end() && responses->is_array() ? responses->size() : 0;
  if (count != ran.size()) {
    throw EtcdError("transaction reply holds " + std::to_string(count) + " responses for " +
                    std::to_string(ran.size()) + " operations");
  }
  for (std::size_t i = 0; i < ran.size(); ++i) {
    if (ran[i].kind != Op::Kind::kRange) continue;
    out.ranges.push_back(kvs_of(object_field((*responses)[i], "response_range")));
  }
  return out;
}

WatchResult Client::watch(const std::string& key, bool prefix, std::int64_t from_revision,
                          std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::int64_t from = from_revision;
  // The watch runs on a connection of its own, closed when it returns; a member that fails
  // before any event arrived hands the watch to the next, from the same revision.
  return impl_->with_failover("watch on '" + key + "'", [&](std::size_t index) {
    return impl_->watch_on(index, key, prefix, from, deadline);
  });
}

}  // namespace ddl::etcd
