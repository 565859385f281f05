// ember-tests' main: GoogleTest's, plus a report when a test crashes. A fatal signal (a
// segmentation fault, a bus error, an abort, a floating-point trap) writes the running test's
// name and the native backtrace to stderr before the process dies as it would have, so a crash
// in a run with --gtest_brief (whose output is buffered when it goes to a file) still names its
// test. The handler writes with write(2) from storage set before the test runs; backtrace() is
// not async-signal-safe by the standard, but with its unwinder loaded before any test (main) it
// allocates nothing, which is what a handler in a dying process needs.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

char g_running[512] = "(no test running)";

void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

extern "C" void on_fatal_signal(int sig) {
  write_str("\n[ember-tests] fatal signal ");
  write_str(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                                                                               : "SIGABRT");
  write_str(" in ");
  write_str(g_running);
  write_str("; backtrace (addr2line -Cfi -e ember-tests OFFSET names the frames):\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  ::signal(sig, SIG_DFL);  // die of the same signal, as without the handler
  ::raise(sig);
}

// Keeps the running test's name where the handler can read it.
class RunningTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& t) override {
    std::snprintf(g_running, sizeof g_running, "%s.%s", t.test_suite_name(), t.name());
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::snprintf(g_running, sizeof g_running, "%s", "(between tests)");
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new RunningTest);
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGABRT}) ::signal(sig, on_fatal_signal);
  return RUN_ALL_TESTS();
}
