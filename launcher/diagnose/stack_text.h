// Reading what the stack tools print: eu-stack's and gdb's native backtraces and py-spy's Python
// ones, cut into threads and frames, and the search for the innermost frame of the job's own code.
// Pure functions on text, so the tests feed them outputs captured from real runs; stacks.h runs the
// tools and calls these.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddl::launcher {

// One thread of a stack dump.
struct ThreadStack {
  int tid = -1;             // the OS thread id; -1 when the tool did not print one
  bool named_main = false;  // the tool called it the main thread (py-spy's "MainThread")
  // Innermost first. Native frames are function names without argument lists ("pause",
  // "ddl::GlooMesh::allreduce", "??" for an address without a symbol); Python frames are as py-spy
  // prints them ("train_step (train.py:42)").
  std::vector<std::string> frames;
};

// `eu-stack -p PID` output ("TID 123:" then "#0  0x00007f... name" lines). Mangled names (as
// with -r) are demangled. Lines that are neither (the "PID 123 - process" header) are skipped.
std::vector<ThreadStack> parse_eu_stack(std::string_view text);

// `gdb -batch -p PID -ex 'thread apply all bt'` output ("Thread 2 (Thread 0x7f... (LWP 124)
// "name"):" then "#0  0x00007f... in name (args) at file:line" lines). gdb's own messages around
// the backtraces are skipped.
std::vector<ThreadStack> parse_gdb(std::string_view text);

// `py-spy dump --pid PID` output ("Thread 123 (idle): "MainThread"" then frames indented by four
// spaces; deeper-indented --locals lines are skipped).
std::vector<ThreadStack> parse_py_spy(std::string_view text);

// A demangled C++ function as a short name: argument lists, cv- and ref-qualifiers, return types
// of templates, ABI tags ("[abi:cxx11]"), GCC clone suffixes (" [clone .cold]") and ELF symbol
// versions ("@@GLIBC_2.34") are dropped; "(anonymous namespace)", template arguments and lambdas
// are kept:
//   "ddl::Mesh::allreduce[abi:cxx11](float*, unsigned long) const" -> "ddl::Mesh::allreduce"
//   "int ddl::run<int>(int)"                                      -> "ddl::run<int>"
//   "ddl::f(int)::{lambda()#1}::operator()() const"               ->
//   "ddl::f::{lambda()#1}::operator()"
// A name starting with "_Z" is demangled first. Empty text gives "??".
std::string short_function_name(std::string_view signature);

// Where a process is stuck, in the job's terms.
struct Innermost {
  std::string frame;  // empty when no thread has any frame
  int tid = -1;       // the thread it was found on
  bool ours = false;  // `frame` is one of ours (starts with one of the prefixes)
};

// The innermost frame of our code: the main thread's (tid == pid, else the thread the tool named
// main, else the first one listed) innermost frame that starts with one of `ours`; if the main
// thread has none, the first such frame of the other threads, in order of thread id; if no thread
// has one, the main thread's innermost frame with `ours` false. An empty prefix matches every
// frame (py-spy's stacks are all the job's code).
Innermost find_innermost(const std::vector<ThreadStack>& threads, int pid,
                         const std::vector<std::string>& ours);

}  // namespace ddl::launcher
