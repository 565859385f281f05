// ember-tests' crash report (main.cpp): a test that dies of a signal is named on stderr, with a
// backtrace, and the process still dies of that signal.
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include "support/run_command.h"

namespace ember::test {
namespace {

TEST(CrashReportChild, DISABLED_DiesOfSegv) { ::raise(SIGSEGV); }

TEST(CrashReport, AFatalSignalNamesItsTestAndKeepsTheSignal) {
  char exe[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  const CommandResult r = run_command(std::string("'") + exe +
                                      "' --gtest_brief=1 --gtest_also_run_disabled_tests"
                                      " --gtest_filter=CrashReportChild.DISABLED_DiesOfSegv 2>&1");
  EXPECT_EQ(r.status, 128 + SIGSEGV) << r.output;
  EXPECT_NE(r.output.find("fatal signal SIGSEGV in CrashReportChild.DISABLED_DiesOfSegv"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("backtrace"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ember::test
