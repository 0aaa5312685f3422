// Helpers shared by tests/test_io_*.cpp: raw file I/O and the Python oracle
// (tests/io_oracle.py run with the project's .venv); the temporary directory and the paths are
// tests/pi0testenv.h's.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>

#include "inference/io/pi0error.h"
#include "tests/pi0testenv.h"

namespace pi0test
{

inline void
write_bytes (const std::string &path, const std::string &bytes)
{
  std::ofstream out (path, std::ios::binary | std::ios::trunc);
  out.write (bytes.data (), static_cast<std::streamsize> (bytes.size ()));
  if (!out)
    throw std::runtime_error ("cannot write " + path);
}

inline std::string
read_bytes (const std::string &path)
{
  std::ifstream in (path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf ();
  return s.str ();
}

/* The tests that need .venv's Python skip without it (PI0_REQUIRE_PYTHON). */
inline bool
have_python ()
{
  return !venv_python ().empty ();
}

inline std::string
shell_quote (const std::string &s)
{
  std::string out = "'";
  for (char c : s)
    out += (c == '\'') ? std::string ("'\\''") : std::string (1, c);
  return out + "'";
}

// Runs tests/io_oracle.py with `args`; returns its stdout. Fails the test (via the returned
// flag) when it exits non-zero.
inline bool
run_oracle (const std::vector<std::string> &args, std::string *out)
{
  std::string cmd =
      shell_quote (venv_python ()) + " " + shell_quote (source_root () + "/tests/io_oracle.py");
  for (const auto &a : args)
    cmd += " " + shell_quote (a);
  FILE *p = popen (cmd.c_str (), "r");
  if (!p)
    return false;
  std::array<char, 4096> buf;
  out->clear ();
  size_t n;
  while ((n = fread (buf.data (), 1, buf.size (), p)) > 0)
    out->append (buf.data (), n);
  int status = pclose (p);
  return WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

#define PI0_REQUIRE_PYTHON()                                                                       \
  do {                                                                                             \
    if (!pi0test::have_python ())                                                                  \
      GTEST_SKIP () << "no " << pi0test::source_root () << "/.venv/bin/python"                     \
                    << " (run scripts/setup.sh)";                                                  \
  } while (0)

// Expects `fn` to throw pi0::Error whose message contains every one of `parts`.
template <typename Fn>
void
expect_error (Fn &&fn, const std::vector<std::string> &parts)
{
  try {
    fn ();
    ADD_FAILURE () << "expected pi0::Error containing '" << (parts.empty () ? "" : parts[0]) << "'";
  } catch (const pi0::Error &e) {
    const std::string msg = e.what ();
    for (const auto &p : parts)
      EXPECT_NE (msg.find (p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception &e) {
    ADD_FAILURE () << "expected pi0::Error, got another exception: " << e.what ();
  }
}

} // namespace pi0test
