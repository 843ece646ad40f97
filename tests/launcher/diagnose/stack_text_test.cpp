// The stack-text parsers on outputs captured from real runs (eu-stack 0.188 and gdb 13.1 on
// Debian 12, attached to stuck_program and to a small program with lambdas, operators and ABI
// tags), and the search for the innermost frame of our code.
#include "launcher/diagnose/stack_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddl::launcher {
namespace {

// `eu-stack -p 13814` on stuck_program.
constexpr const char* kEuStackSample = R"TXT(PID 13814 - process
TID 13814:
#0  0x00007fe79a2d1df2 pause
#1  0x0000556c46129445 ddl::test::wait_in_known_place()
#2  0x0000556c461292b1 main
#3  0x00007fe79a22524a __libc_start_call_main
#4  0x00007fe79a225305 __libc_start_main@@GLIBC_2.34
#5  0x0000556c461292f1 _start
TID 13816:
#0  0x00007fe79a2d1df2 pause
#1  0x0000556c461293f5 ddl::test::wait_in_second_thread()
#2  0x00007fe79a4d44a3
#3  0x00007fe79a2871f5 start_thread
#4  0x00007fe79a3078ec __clone3
)TXT";

// `eu-stack -r -p 13814` (raw, mangled names).
constexpr const char* kEuStackRawSample = R"TXT(PID 13814 - process
TID 13814:
#0  0x00007fe79a2d1df2 pause
#1  0x0000556c46129445 _ZN3ddl4test19wait_in_known_placeEv
#2  0x0000556c461292b1 main
TID 13816:
#0  0x00007fe79a2d1df2 pause
#1  0x0000556c461293f5 _ZN3ddl4test21wait_in_second_threadEv
#2  0x00007fe79a4d44a3
)TXT";

// `gdb -nx -batch -p 13814 -ex 'thread apply all bt'` on the same process (stdout).
constexpr const char* kGdbSample = R"TXT([New LWP 13816]
[Thread debugging using libthread_db enabled]
Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".
0x00007fe79a2d1df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29

Thread 2 (Thread 0x7fe79a11d6c0 (LWP 13816) "stuck"):
#0  0x00007fe79a2d1df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
#1  0x0000556c461293f5 in ddl::test::wait_in_second_thread() ()
#2  0x00007fe79a4d44a3 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6
#3  0x00007fe79a2871f5 in start_thread (arg=<optimized out>) at ./nptl/pthread_create.c:442
#4  0x00007fe79a3078ec in clone3 () at ../sysdeps/unix/sysv/linux/x86_64/clone3.S:81

Thread 1 (Thread 0x7fe79a637440 (LWP 13814) "stuck"):
#0  0x00007fe79a2d1df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
#1  0x0000556c46129445 in ddl::test::wait_in_known_place() ()
#2  0x0000556c461292b1 in main ()
[Inferior 1 (process 13814) detached]
)TXT";

// gdb on a program whose main thread waits in a function of an anonymous namespace and whose
// other threads wait in a member with an ABI tag and in an operator().
constexpr const char* kGdbRichSample = R"TXT(Thread 3 (Thread 0x7f9975f3c6c0 (LWP 13869) "rich"):
#0  0x00007f99768f1df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
#1  0x00005628db67c505 in ddl::Mesh::operator()(int) const ()
#2  0x00007f9976ad44a3 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6

Thread 2 (Thread 0x7f997673d6c0 (LWP 13868) "rich"):
#0  0x00007f99768f1df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
#1  0x00005628db67c465 in ddl::Mesh::allreduce[abi:cxx11](float*, unsigned long) const ()
#2  0x00005628db67c4ca in std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run() ()

Thread 1 (Thread 0x7f9976c98440 (LWP 13867) "rich"):
#0  0x00007f99768f1df2 in __libc_pause () at ../sysdeps/unix/sysv/linux/pause.c:29
#1  0x00005628db67c305 in ddl::(anonymous namespace)::train(int) ()
#2  0x00005628db67c1ab in main ()
[Inferior 1 (process 13867) detached]
)TXT";

// py-spy is not installed here: written from py-spy's dump format (src/dump.rs: "Thread <os tid>
// (<status>): "<name>"", frames as "    name (file:line)", locals indented by eight).
constexpr const char* kPySpySample = R"TXT(Process 4242: python train.py --epochs 2
Python v3.11.2 (/usr/bin/python3.11)

Thread 4250 (active): "Thread-1 (loader)"
    _worker (loader.py:12)
    run (threading.py:975)
Thread 4242 (idle): "MainThread"
    train_step (train.py:42)
        Arguments:
            batch: <Tensor at 0x7f>
    main (train.py:60)
    <module> (train.py:64)
)TXT";

// hello_worker hanging through DDL_FAULT=rank=0,step=1,hang: eu-stack, then gdb's frames (the
// innermost has arguments from libc's debug info and no address).
constexpr const char* kEuStackWorkerSample = R"TXT(PID 17661 - process
TID 17661:
#0  0x00007fc2610ed503 clock_nanosleep@GLIBC_2.2.5
#1  0x00007fc2610f1e53 __nanosleep
#2  0x000055a492243d10 ddl::FaultInjector::at_step(long) const
#3  0x000055a49223bf3a main
#4  0x00007fc26104524a __libc_start_call_main
)TXT";
constexpr const char* kGdbWorkerSample = R"TXT(Thread 1 (process 17661):
#0  __GI___clock_nanosleep (clock_id=clock_id@entry=0, flags=flags@entry=0, req=0x7ffdabd7d2b0, rem=0x7ffdabd7d2b0) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:71
#1  0x00007fc2610f1e53 in __GI___nanosleep (req=<optimized out>, rem=<optimized out>) at ../sysdeps/unix/sysv/linux/nanosleep.c:25
#2  0x000055a492243d10 in ddl::FaultInjector::at_step(long) const ()
#3  0x000055a49223bf3a in main ()
)TXT";

std::vector<std::string> frames_of(const ThreadStack& t) { return t.frames; }

TEST(StackText, EuStackSampleGivesBothThreadsWithShortNames) {
  const auto threads = parse_eu_stack(kEuStackSample);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].tid, 13814);
  EXPECT_EQ(threads[1].tid, 13816);
  EXPECT_EQ(frames_of(threads[0]),
            (std::vector<std::string>{"pause", "ddl::test::wait_in_known_place", "main",
                                      "__libc_start_call_main", "__libc_start_main", "_start"}));
  EXPECT_EQ(frames_of(threads[1]),
            (std::vector<std::string>{"pause", "ddl::test::wait_in_second_thread", "??",
                                      "start_thread", "__clone3"}));
}

TEST(StackText, EuStackRawSampleIsDemangled) {
  const auto threads = parse_eu_stack(kEuStackRawSample);
  ASSERT_EQ(threads.size(), 2u);
  ASSERT_EQ(threads[0].frames.size(), 3u);
  EXPECT_EQ(threads[0].frames[1], "ddl::test::wait_in_known_place");
  EXPECT_EQ(threads[1].frames[1], "ddl::test::wait_in_second_thread");
}

TEST(StackText, GdbSampleGivesBothThreadsWithoutItsOwnMessages) {
  const auto threads = parse_gdb(kGdbSample);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].tid, 13816);
  EXPECT_EQ(threads[1].tid, 13814);
  EXPECT_EQ(frames_of(threads[0]),
            (std::vector<std::string>{"__libc_pause", "ddl::test::wait_in_second_thread", "??",
                                      "start_thread", "clone3"}));
  EXPECT_EQ(frames_of(threads[1]),
            (std::vector<std::string>{"__libc_pause", "ddl::test::wait_in_known_place", "main"}));
}

TEST(StackText, GdbRichSampleKeepsOperatorsTemplatesAndAnonymousNamespaces) {
  const auto threads = parse_gdb(kGdbRichSample);
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_EQ(threads[0].frames.at(1), "ddl::Mesh::operator()");
  EXPECT_EQ(threads[1].frames.at(1), "ddl::Mesh::allreduce");
  EXPECT_EQ(threads[1].frames.at(2),
            "std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > "
            ">::_M_run");
  EXPECT_EQ(threads[2].frames.at(1), "ddl::(anonymous namespace)::train");
}

TEST(StackText, HangingWorkerSamplesNameTheFaultInjector) {
  for (const auto& threads : {parse_eu_stack(kEuStackWorkerSample), parse_gdb(kGdbWorkerSample)}) {
    ASSERT_EQ(threads.size(), 1u);
    EXPECT_EQ(threads[0].tid, 17661);
    ASSERT_GE(threads[0].frames.size(), 3u);
    EXPECT_EQ(threads[0].frames[2], "ddl::FaultInjector::at_step");
    const Innermost in = find_innermost(threads, 17661, {"ddl::"});
    EXPECT_EQ(in.frame, "ddl::FaultInjector::at_step");
    EXPECT_TRUE(in.ours);
  }
  EXPECT_EQ(parse_eu_stack(kEuStackWorkerSample)[0].frames[0], "clock_nanosleep");
  EXPECT_EQ(parse_gdb(kGdbWorkerSample)[0].frames[0], "__GI___clock_nanosleep");
}

TEST(StackText, PySpySampleFindsMainThreadAndSkipsLocals) {
  const auto threads = parse_py_spy(kPySpySample);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].tid, 4250);
  EXPECT_FALSE(threads[0].named_main);
  EXPECT_TRUE(threads[1].named_main);
  EXPECT_EQ(frames_of(threads[1]),
            (std::vector<std::string>{"train_step (train.py:42)", "main (train.py:60)",
                                      "<module> (train.py:64)"}));
  const Innermost in = find_innermost(threads, 4242, {""});
  EXPECT_EQ(in.frame, "train_step (train.py:42)");
  EXPECT_EQ(in.tid, 4242);
}

TEST(StackText, PySpyHexThreadIdsUseTheMainThreadsName) {
  const auto threads = parse_py_spy(
      "Thread 0x7F10 (active+gil)\n    spin (a.py:3)\n"
      "Thread 0x7F20 (idle): \"MainThread\"\n    wait (b.py:9)\n");
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].tid, -1);
  EXPECT_EQ(find_innermost(threads, 77, {""}).frame, "wait (b.py:9)");
}

TEST(StackText, ShortFunctionNames) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ddl::test::wait_in_known_place()", "ddl::test::wait_in_known_place"},
      {"pause", "pause"},
      {"", "??"},
      {"__libc_start_main@@GLIBC_2.34", "__libc_start_main"},
      {"pause@plt", "pause"},
      {"ddl::Mesh::allreduce[abi:cxx11](float*, unsigned long) const", "ddl::Mesh::allreduce"},
      {"ddl::Mesh::operator()(int) const", "ddl::Mesh::operator()"},
      {"ddl::operator<<(std::ostream&, ddl::Endpoint const&)", "ddl::operator<<"},
      {"ddl::Ring::operator<(ddl::Ring const&) const", "ddl::Ring::operator<"},
      {"int ddl::run<int>(int)", "ddl::run<int>"},
      {"std::vector<int, std::allocator<int> > ddl::make(unsigned long)", "ddl::make"},
      {"ddl::(anonymous namespace)::train(int)", "ddl::(anonymous namespace)::train"},
      {"ddl::f(int)::{lambda()#1}::operator()() const", "ddl::f::{lambda()#1}::operator()"},
      {"ddl::GlooMesh::allreduce(float*, unsigned long) [clone .cold]", "ddl::GlooMesh::allreduce"},
      {"_ZN3ddl8GlooMesh9allreduceEPfm", "ddl::GlooMesh::allreduce"},
      {"_ZN3ddl8GlooMesh9allreduceEPfm.cold", "ddl::GlooMesh::allreduce"},
      {"ddl::Queue::pop() &&", "ddl::Queue::pop"},
  };
  for (const auto& [signature, expected] : cases) {
    EXPECT_EQ(short_function_name(signature), expected) << "for '" << signature << "'";
  }
}

ThreadStack thread(int tid, std::vector<std::string> frames) {
  ThreadStack t;
  t.tid = tid;
  t.frames = std::move(frames);
  return t;
}

TEST(StackText, InnermostPrefersTheMainThread) {
  const std::vector<ThreadStack> threads = {
      thread(11, {"pause", "ddl::Loader::next", "??"}),
      thread(10, {"futex_wait", "std::condition_variable::wait", "ddl::GlooMesh::allreduce",
                  "ddl::Trainer::step", "main"}),
  };
  const Innermost in = find_innermost(threads, 10, {"ddl::"});
  EXPECT_EQ(in.frame, "ddl::GlooMesh::allreduce");
  EXPECT_EQ(in.tid, 10);
  EXPECT_TRUE(in.ours);
}

TEST(StackText, InnermostFallsBackToTheLowestOtherThreadThenToAnyFrame) {
  const std::vector<ThreadStack> threads = {
      thread(10, {"pthread_join", "main"}),
      thread(13, {"pause", "ddl::Late::wait"}),
      thread(12, {"pause", "ddl::Early::wait"}),
  };
  Innermost in = find_innermost(threads, 10, {"ddl::"});
  EXPECT_EQ(in.frame, "ddl::Early::wait");
  EXPECT_EQ(in.tid, 12);
  EXPECT_TRUE(in.ours);

  in = find_innermost(threads, 10, {"mylib::"});
  EXPECT_EQ(in.frame, "pthread_join");
  EXPECT_EQ(in.tid, 10);
  EXPECT_FALSE(in.ours);

  // Several prefixes: any one of them counts.
  in = find_innermost(threads, 10, {"mylib::", "main"});
  EXPECT_EQ(in.frame, "main");
  EXPECT_TRUE(in.ours);

  EXPECT_EQ(find_innermost({}, 10, {"ddl::"}).frame, "");
}

}  // namespace
}  // namespace ddl::launcher
