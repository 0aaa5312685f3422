/* Running a command-line tool from a test, as a user would (through popen), and requiring the
 * real lerobot's Python that some tests run. */
#pragma once

#include "tests/pi0testenv.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
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

/* Declares `py`, the real lerobot's Python (pi0test::lerobot_python(), tests/pi0testenv.h: the
 * source tree's .lerobot-venv, which scripts/setup.sh makes). Without one: a failure in CI
 * (PI0_CI set), saying what CI must do with it (@why; LeRobot's own code is the peer these tests
 * hold us to), a skip elsewhere. A macro: FAIL and GTEST_SKIP return from the test that uses
 * it. */
#define REQUIRE_LEROBOT_PYTHON(py, why)                                                            \
  const std::string py = pi0test::lerobot_python ();                                               \
  if (py.empty () && std::getenv ("PI0_CI") != nullptr)                                            \
    FAIL () << "no .lerobot-venv: CI must " why;                                                   \
  if (py.empty ())                                                                                 \
  GTEST_SKIP () << "no .lerobot-venv (scripts/setup.sh makes it with Python 3.12)"
