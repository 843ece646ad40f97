// The error policy's one mapping (env/error.h): each error type's exit code and context, the
// fallback for foreign exceptions, and run_main reporting one line.
#include "env/error.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "env/contract.h"
#include "env/exit_codes.h"
#include "store/store.h"
#include "worker/comm/comm_error.h"

namespace ddl {
namespace {

TEST(ExitFor, EachErrorCarriesItsCodeAndContext) {
  EXPECT_EQ(exit_for(StoreError("no key 'x'")).exit_code, kExitParallel);
  EXPECT_EQ(exit_for(StoreError("no key 'x'")).message, "rendezvous store: no key 'x'");
  EXPECT_EQ(exit_for(StoreTimeout("keys a, b")).exit_code, kExitDeadline);
  EXPECT_EQ(exit_for(CommError("gloo all_reduce")).exit_code, kExitParallel);
  EXPECT_EQ(exit_for(CommTimeout("gloo recv")).exit_code, kExitDeadline);
  EXPECT_EQ(exit_for(CommTimeout("gloo recv")).message, "collective: gloo recv");
  EXPECT_EQ(exit_for(env::EnvError("RANK='x'")).message, "environment: RANK='x'");
  EXPECT_EQ(exit_for(Error(kExitNotFound, "", "no such worker")).message, "no such worker");
}

TEST(ExitFor, AForeignExceptionIsAnErrorInOneLine) {
  const ErrorExit exit = exit_for(std::runtime_error("first\nsecond"));
  EXPECT_EQ(exit.exit_code, kExitError);
  EXPECT_EQ(exit.message, "first second");
}

TEST(RunMain, ReturnsTheBodysCodeOrReportsTheErrorOnce) {
  int reports = 0;
  std::string line;
  const ErrorReporter report = [&](const ErrorExit& exit) {
    ++reports;
    line = exit.message;
  };
  EXPECT_EQ(run_main([] { return 7; }, report), 7);
  EXPECT_EQ(reports, 0);
  EXPECT_EQ(run_main([]() -> int { throw CommTimeout("gloo recv\nfrom rank 1"); }, report),
            kExitDeadline);
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(line, "collective: gloo recv from rank 1");
  const ErrorMapper mine = [](const std::exception& e) {
    return ErrorExit{kExitUsage, std::string("mine: ") + e.what()};
  };
  EXPECT_EQ(run_main([]() -> int { throw std::invalid_argument("x"); }, report, mine), kExitUsage);
  EXPECT_EQ(line, "mine: x");
}

}  // namespace
}  // namespace ddl
