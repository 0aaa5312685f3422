/* Running a command-line tool from a test, as a user would (through popen). */
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace pi0test
{

struct CommandResult {
  int status = -1; /* exit status; -1 when it could not run or was killed */
  std::string out; /* stdout and stderr together */
};

/* Runs @cmd with sh, its stdout and stderr captured together. */
inline CommandResult
run_command (const std::string &cmd)
{
  CommandResult r;
  FILE *p = popen ((cmd + " 2>&1").c_str (), "r");
  if (!p)
    return r;
  char buf[4096];
  size_t n;
  while ((n = fread (buf, 1, sizeof buf, p)) > 0)
    r.out.append (buf, n);
  const int st = pclose (p);
  r.status = WIFEXITED (st) ? WEXITSTATUS (st) : -1;
  return r;
}

} // namespace pi0test
