#include "launcher/diagnose/stack_text.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "env/text.h"

namespace ddl::launcher {

namespace {

constexpr std::string_view kAnonymousNamespace = "(anonymous namespace)";
constexpr std::string_view kOperator = "operator";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// The decimal number at the start of `s` (digits only), or -1.
int leading_number(std::string_view s) {
  std::size_t n = 0;
  while (n < s.size() && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  if (n == 0 || n > 9) return -1;
  return std::atoi(std::string(s.substr(0, n)).c_str());
}

bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$';
}

// If an operator name ("operator()", "operator<<=", "operator new") starts at `i`, the index just
// past it; else `i`. Its symbol characters must not be read as brackets or as a return type's
// separating space.
std::size_t skip_operator(std::string_view s, std::size_t i) {
  if (!starts_with(s.substr(i), kOperator)) return i;
  if (i > 0 && is_identifier_char(s[i - 1])) return i;
  std::size_t j = i + kOperator.size();
  if (j < s.size() && is_identifier_char(s[j])) return i;  // "operator_count", not an operator
  if (starts_with(s.substr(j), "()") || starts_with(s.substr(j), "[]")) return j + 2;
  constexpr std::string_view kSymbols = "+-*/%^&|~!=<>,";
  const std::size_t symbols_start = j;
  while (j < s.size() && kSymbols.find(s[j]) != std::string_view::npos) ++j;
  if (j > symbols_start) return j;
  // "operator new[]", "operator delete", a conversion "operator bool": a space and a word.
  while (j < s.size() && s[j] == ' ') ++j;
  while (j < s.size() && is_identifier_char(s[j])) ++j;
  if (starts_with(s.substr(j), "[]")) j += 2;
  return j;
}

// The index just past the bracket that closes the one opened at `open`, counting all of ([{<
// together (balanced in demangled names, operators aside); s.size() if it never closes.
std::size_t skip_brackets(std::string_view s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    const std::size_t past_operator = skip_operator(s, i);
    if (past_operator != i) {
      i = past_operator - 1;
      continue;
    }
    const char c = s[i];
    if (c == '(' || c == '[' || c == '{' || c == '<') ++depth;
    if (c == ')' || c == ']' || c == '}' || c == '>') {
      if (--depth == 0) return i + 1;
    }
  }
  return s.size();
}

std::string demangle(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : symbol;
}

// A function's qualifiers after its argument list; `s` at the position after the ')'. Returns the
// index past them.
std::size_t skip_qualifiers(std::string_view s, std::size_t i) {
  for (;;) {
    bool found = false;
    for (std::string_view q : {" const", " volatile", " &&", " &", " noexcept"}) {
      if (starts_with(s.substr(i), q)) {
        i += q.size();
        found = true;
      }
    }
    if (!found) return i;
  }
}

// gdb writes "NAME (ARGS) at FILE:LINE" or "NAME (ARGS) from LIB", where NAME may be a whole
// demangled signature ("ddl::f(int) ()"): the part before the first " (" that is not inside
// brackets.
std::string_view gdb_function_part(std::string_view rest) {
  if (starts_with(rest, "<")) return rest;  // "<signal handler called>"
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const std::size_t past_operator = skip_operator(rest, i);
    if (past_operator != i) {
      i = past_operator - 1;
      continue;
    }
    const char c = rest[i];
    if (c == ' ' && starts_with(rest.substr(i + 1), "(") &&
        !starts_with(rest.substr(i + 1), kAnonymousNamespace)) {
      return rest.substr(0, i);
    }
    if (c == '(' || c == '<' || c == '{' || c == '[') i = skip_brackets(rest, i) - 1;
  }
  return rest;
}

// A frame line ("#12  0x00007f... name"): true, with the text after the frame number in `body`.
bool frame_body(std::string_view line, std::string_view* body) {
  line = env::trim(line);
  if (!starts_with(line, "#")) return false;
  std::size_t i = 1;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i == 1 || (i < line.size() && line[i] != ' ')) return false;
  *body = env::trim(line.substr(i));
  return true;
}

// "0x00007f...": true and the rest after it.
bool strip_address(std::string_view* s) {
  if (!starts_with(*s, "0x")) return false;
  std::size_t i = 2;
  while (i < s->size() && std::isxdigit(static_cast<unsigned char>((*s)[i]))) ++i;
  *s = env::trim(s->substr(i));
  return true;
}

}  // namespace

std::string short_function_name(std::string_view signature) {
  std::string text(env::trim(signature));
  const std::size_t at = text.find('@');  // symbol version ("@@GLIBC_2.34") or "@plt"
  if (at != std::string::npos && at > 0) text.erase(at);
  if (starts_with(text, "_Z")) text = demangle(text);
  const std::size_t clone = text.find(" [clone ");
  if (clone != std::string::npos) text.erase(clone);
  if (text.empty()) return "??";

  const std::string_view s = text;
  std::string name;       // finished segments ("ddl::f" before "::{lambda()#1}")
  std::size_t start = 0;  // where the current segment began
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t past_operator = skip_operator(s, i);
    if (past_operator != i) {
      i = past_operator;
      continue;
    }
    if (starts_with(s.substr(i), kAnonymousNamespace)) {
      i += kAnonymousNamespace.size();
      continue;
    }
    const char c = s[i];
    if (c == ' ') {
      // Only a template's return type is separated by a space outside brackets.
      name.clear();
      start = i + 1;
      ++i;
    } else if (c == '[') {
      // An ABI tag: "[abi:cxx11]".
      name.append(s.substr(start, i - start));
      i = skip_brackets(s, i);
      start = i;
    } else if (c == '(') {
      name.append(s.substr(start, i - start));
      i = skip_qualifiers(s, skip_brackets(s, i));
      if (!starts_with(s.substr(i), "::")) return name.empty() ? "??" : name;
      // A local entity ("ddl::f(int)::{lambda()#1}"): its name goes on after the enclosing one.
      name.append("::");
      i += 2;
      start = i;
    } else if (c == '<' || c == '{') {
      i = skip_brackets(s, i);
    } else {
      ++i;
    }
  }
  name.append(s.substr(start));
  return name.empty() ? "??" : name;
}

std::vector<ThreadStack> parse_eu_stack(std::string_view text) {
  std::vector<ThreadStack> threads;
  for (std::string_view line : split_lines(text)) {
    if (starts_with(line, "TID ")) {
      ThreadStack t;
      t.tid = leading_number(line.substr(4));
      threads.push_back(std::move(t));
      continue;
    }
    std::string_view body;
    if (threads.empty() || !frame_body(line, &body)) continue;
    strip_address(&body);
    threads.back().frames.push_back(short_function_name(body));
  }
  return threads;
}

std::vector<ThreadStack> parse_gdb(std::string_view text) {
  std::vector<ThreadStack> threads;
  for (std::string_view line : split_lines(text)) {
    const std::string_view trimmed = env::trim(line);
    if (starts_with(trimmed, "Thread ") && trimmed.size() > 2 &&
        trimmed.substr(trimmed.size() - 2) == "):") {
      ThreadStack t;
      for (std::string_view marker : {"(LWP ", "(process "}) {
        const std::size_t at = trimmed.find(marker);
        if (at != std::string_view::npos) {
          t.tid = leading_number(trimmed.substr(at + marker.size()));
          break;
        }
      }
      threads.push_back(std::move(t));
      continue;
    }
    std::string_view body;
    if (threads.empty() || !frame_body(line, &body)) continue;
    if (strip_address(&body) && starts_with(body, "in ")) body.remove_prefix(3);
    threads.back().frames.push_back(short_function_name(gdb_function_part(body)));
  }
  return threads;
}

std::vector<ThreadStack> parse_py_spy(std::string_view text) {
  std::vector<ThreadStack> threads;
  for (std::string_view line : split_lines(text)) {
    if (starts_with(line, "Thread ")) {
      ThreadStack t;
      const std::string_view rest = line.substr(7);
      const std::string_view id = rest.substr(0, rest.find(' '));
      if (all_digits(id)) t.tid = leading_number(id);
      t.named_main = line.find("\"MainThread\"") != std::string_view::npos;
      threads.push_back(std::move(t));
      continue;
    }
    // Frames are indented by four spaces; --locals adds deeper-indented lines under them.
    if (threads.empty() || !starts_with(line, "    ") || line.size() < 5 || line[4] == ' ') {
      continue;
    }
    const std::string_view frame = env::trim(line);
    if (!frame.empty()) threads.back().frames.emplace_back(frame);
  }
  return threads;
}

Innermost find_innermost(const std::vector<ThreadStack>& threads, int pid,
                         const std::vector<std::string>& ours) {
  if (threads.empty()) return {};
  auto is_ours = [&](const std::string& frame) {
    return std::any_of(ours.begin(), ours.end(),
                       [&](const std::string& prefix) { return starts_with(frame, prefix); });
  };
  auto first_ours = [&](const ThreadStack& t) {
    return std::find_if(t.frames.begin(), t.frames.end(), is_ours);
  };

  auto main = std::find_if(threads.begin(), threads.end(),
                           [&](const ThreadStack& t) { return t.tid == pid && pid > 0; });
  if (main == threads.end()) {
    main = std::find_if(threads.begin(), threads.end(),
                        [](const ThreadStack& t) { return t.named_main; });
  }
  if (main == threads.end()) main = threads.begin();

  if (auto f = first_ours(*main); f != main->frames.end()) return {*f, main->tid, true};

  std::vector<const ThreadStack*> others;
  for (const ThreadStack& t : threads) {
    if (&t != &*main) others.push_back(&t);
  }
  // Unknown thread ids (-1) last; the lowest id is the thread started first.
  std::stable_sort(others.begin(), others.end(), [](const ThreadStack* a, const ThreadStack* b) {
    const unsigned ka = static_cast<unsigned>(a->tid), kb = static_cast<unsigned>(b->tid);
    return ka < kb;
  });
  for (const ThreadStack* t : others) {
    if (auto f = first_ours(*t); f != t->frames.end()) return {*f, t->tid, true};
  }
  if (main->frames.empty()) return {};
  return {main->frames.front(), main->tid, false};
}

}  // namespace ddl::launcher
