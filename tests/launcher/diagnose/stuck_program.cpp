// A process that is stuck in known places, for the stack-dump tests: the main thread waits in
// ddl::test::wait_in_known_place() and a second thread in ddl::test::wait_in_second_thread(). It
// prints "ready" once both are inside their functions and then waits until it is killed (or gets
// SIGTERM).
//
//   stuck_program            both threads as above
//   stuck_program --outside  the main thread waits in main() itself, outside namespace ddl, so that
//                            the only frame of "our" code is on the second thread
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace ddl::test {

namespace {

std::atomic<bool> g_second_thread_waiting{false};
volatile sig_atomic_t g_stop = 0;

void on_term(int) { g_stop = 1; }

}  // namespace

// Not inlined and not noreturn: the frames must stay where the tests look for them, and the loop
// on g_stop keeps the compiler from turning the call to pause() into a tail call.
[[gnu::noinline]] void wait_in_second_thread() {
  g_second_thread_waiting = true;
  while (!g_stop) ::pause();
}

[[gnu::noinline]] void wait_in_known_place() {
  std::puts("ready");
  std::fflush(stdout);
  while (!g_stop) ::pause();
}

}  // namespace ddl::test

int main(int argc, char** argv) {
  const bool outside = argc > 1 && std::strcmp(argv[1], "--outside") == 0;
  struct sigaction sa {};
  sa.sa_handler = ddl::test::on_term;
  ::sigaction(SIGTERM, &sa, nullptr);

  std::thread second(ddl::test::wait_in_second_thread);
  while (!ddl::test::g_second_thread_waiting)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (outside) {
    std::puts("ready");
    std::fflush(stdout);
    while (!ddl::test::g_stop) ::pause();
  } else {
    ddl::test::wait_in_known_place();
  }
  // SIGTERM reaches one thread only; wake the other one too.
  ::pthread_kill(second.native_handle(), SIGTERM);
  second.join();
  return 0;
}
