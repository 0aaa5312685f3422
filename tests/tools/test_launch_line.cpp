/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tools/common/pi0launchline.h, how pi0-demo reads pipelines/demo.txt without a shell: the
 * data directories searched in order, comment lines dropped, ${NAME} and ${NAME:-default}
 * expanded as bash does (checked against bash itself on every pipelines/ line it accepts), and
 * a clear error, naming the variable, for what it does not expand. No GStreamer. */

#include "tests/pi0testenv.h"
#include "tools/common/pi0launchline.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using pi0::tools::expand_line_vars;
using pi0::tools::LineVars;
using pi0test::source_root;

namespace
{

/* @line after bash's parameter expansion alone (a here-document: quotes stay as they are, as
 * for expand_line_vars), with @vars in its environment. */
std::string
bash_expand (const std::string &line, const LineVars &vars)
{
  std::string cmd = "env -i";
  for (const auto &kv : vars)
    cmd += " " + kv.first + "='" + kv.second + "'";
  setenv ("PI0_LINE", line.c_str (), 1);
  cmd += " PI0_LINE=\"$PI0_LINE\" bash -c 'eval \"cat <<PI0_EOF\n$PI0_LINE\nPI0_EOF\"'";
  std::string out;
  FILE *p = popen (cmd.c_str (), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread (buf, 1, sizeof buf, p)) > 0)
    out.append (buf, n);
  if (p)
    pclose (p);
  if (!out.empty () && out.back () == '\n')
    out.pop_back ();
  return out;
}

} // namespace

TEST (LaunchLine, ExpandsValuesAndDefaults)
{
  std::string out, error;
  const LineVars vars = {{"PORT", "5006"}, {"EMPTY", ""}, {"SPACE", "a b"}};
  ASSERT_TRUE (expand_line_vars ("port=${PORT:-5005} x=${EMPTY:-d} y=${SPACE} z=${NONE:-1 2}", vars,
                                 &out, &error))
      << error;
  EXPECT_EQ (out, "port=5006 x=d y=a b z=1 2");
  /* Set but empty, without a default: nothing, as in bash. An empty default is a value too. */
  ASSERT_TRUE (expand_line_vars ("[${EMPTY}][${NONE:-}]", vars, &out, &error)) << error;
  EXPECT_EQ (out, "[][]");
  /* Quotes are text: the parser after it handles them. */
  ASSERT_TRUE (expand_line_vars ("i=\"${I:-pick up}\" c='${PORT}'", vars, &out, &error));
  EXPECT_EQ (out, "i=\"pick up\" c='5006'");
}

TEST (LaunchLine, AVariableWithoutValueOrDefaultIsAnErrorNamingIt)
{
  std::string out, error;
  EXPECT_FALSE (expand_line_vars ("udpsrc port=${STATE_PORT} ! fakesink", {}, &out, &error));
  EXPECT_NE (error.find ("${STATE_PORT}"), std::string::npos) << error;
  EXPECT_NE (error.find ("no value and no default"), std::string::npos) << error;
}

TEST (LaunchLine, WhatItDoesNotExpandIsAnErrorNotPassedThrough)
{
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"location=$HOME/x", "not '$HOME/x"},
      {"n=$((1 + 2))", "not '$((1 + 2))"},
      {"end$", "not '$'"},
      {"a=${A-x}", "'${A-x}' is not"},
      {"a=${A:=x}", "'${A:=x}' is not"},
      {"a=${1}", "'${1}' is not"},
      {"a=${}", "'${}' is not"},
      {"a=${A:-${B}}", "nested"},
      {"a=${A", "unterminated '${' at character 3"},
  };
  for (const auto &c : cases) {
    std::string out, error;
    EXPECT_FALSE (expand_line_vars (c.first, {{"A", "1"}, {"B", "2"}}, &out, &error)) << c.first;
    EXPECT_NE (error.find (c.second), std::string::npos) << c.first << ": " << error;
  }
}

/* Every pipelines/ line that it expands, it expands as bash does; demo.txt is one of them. */
TEST (LaunchLine, MatchesBashOnThePipelines)
{
  const std::string dir = source_root () + "/pipelines";
  DIR *d = opendir (dir.c_str ());
  ASSERT_NE (d, nullptr) << dir;
  const LineVars vars = {{"ROBOT_PORT", "9999"},
                         {"STATE_PORT", "5999"},
                         {"ROBOT_CONFIG", "/x/robot.json"},
                         {"LIVE", "false"},
                         {"MAX_WAIT", "18446744073709551615"},
                         {"REC", ""}};
  int compared = 0;
  bool demo = false;
  while (dirent *e = readdir (d)) {
    const std::string name = e->d_name;
    if (name.size () < 5 || name.compare (name.size () - 4, 4, ".txt") != 0)
      continue;
    std::string line, out, error;
    ASSERT_TRUE (pi0::tools::read_launch_line (dir + "/" + name, &line, &error)) << error;
    if (!expand_line_vars (line, vars, &out, &error)) {
      EXPECT_NE (name, "demo.txt") << error;
      continue;
    }
    EXPECT_EQ (out, bash_expand (line, vars)) << name;
    compared++;
    demo = demo || name == "demo.txt";
  }
  closedir (d);
  EXPECT_TRUE (demo);
  EXPECT_GE (compared, 10);
  std::printf ("%d pipelines/ lines expanded as bash does\n", compared);
}

TEST (LaunchLine, ReadDropsCommentLinesAndJoinsTheRest)
{
  const std::string demo = source_root () + "/pipelines/demo.txt";
  std::string line, error;
  ASSERT_TRUE (pi0::tools::read_launch_line (demo, &line, &error)) << error;
  EXPECT_EQ (line.find ('#'), std::string::npos) << line;
  EXPECT_EQ (line.find ('\n'), std::string::npos) << line;
  EXPECT_EQ (line.rfind ("pi0viewmux name=mux ", 0), 0u) << line;
  EXPECT_NE (line.find ("max-state-age=50000000   ! cudaprep"), std::string::npos) << line;
  EXPECT_FALSE (pi0::tools::read_launch_line ("/dev/null", &line, &error));
  EXPECT_EQ (error, "/dev/null holds no launch line");
  EXPECT_FALSE (pi0::tools::read_launch_line ("/nonexistent/demo.txt", &line, &error));
  EXPECT_EQ (error, "cannot read /nonexistent/demo.txt");
}

TEST (LaunchLine, DataFileIsTheFirstFoundAndAMissingOneNamesWhereItLooked)
{
  const std::string root = source_root ();
  std::string error;
  EXPECT_EQ (pi0::tools::find_data_file ("pipelines/demo.txt", {"/nonexistent", root}, &error),
             root + "/pipelines/demo.txt");
  EXPECT_EQ (pi0::tools::find_data_file ("pipelines/demo.txt", {root, "/nonexistent"}, &error),
             root + "/pipelines/demo.txt");
  EXPECT_EQ (pi0::tools::find_data_file ("pipelines/none.txt", {"/nonexistent", root}, &error), "");
  EXPECT_EQ (error, "pipelines/none.txt not found (looked in: /nonexistent/pipelines/none.txt, " +
                        root + "/pipelines/none.txt)");
}
