// Runs a shell command for tests that drive other programs: its exit status and its output.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace ember::test {

struct CommandResult {
  int status = -1;     // the exit code, or 128 + the signal that ended it (as a shell says)
  std::string output;  // stdout (append 2>&1 to the command for stderr too)
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace ember::test
