/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common/pi0json: the project's one JSON reader. */
#include "common/pi0json.h"
#include "tests/pi0testenv.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>

using namespace pi0::json;

TEST (Json, ParsesAndKeepsValues)
{
  std::string err;
  auto v = parse_strict (R"({"a":[1,2.5],"b":{"c":"x"}})", "t.json", &err);
  ASSERT_TRUE (v) << err;
  EXPECT_EQ ((*v)["b"]["c"], "x");
  std::vector<float> a;
  ASSERT_TRUE (to_float_array ((*v)["a"], "\"a\"", &a, &err)) << err;
  EXPECT_EQ (a, (std::vector<float>{1.0f, 2.5f}));
}

TEST (Json, RefusesADuplicateKeyNamingItAndWhereItIs)
{
  std::string err;
  EXPECT_FALSE (parse_strict (R"({"a":1,"a":2})", "t.json", &err));
  EXPECT_NE (err.find ("t.json: the same object has the key 'a' more than once"), std::string::npos)
      << err;
  EXPECT_NE (err.find ("(at /)"), std::string::npos) << err;
  /* Nested, inside an array: the path points at the object. */
  EXPECT_FALSE (parse_strict (R"({"x":[{"k":1},{"k":1,"k":2}]})", "t.json", &err));
  EXPECT_NE (err.find ("the key 'k' more than once (at /x/1)"), std::string::npos) << err;
  /* The same key in different objects is fine. */
  EXPECT_TRUE (parse_strict (R"({"x":{"k":1},"y":{"k":1}})", "t.json", &err)) << err;
}

TEST (Json, MalformedTextIsAnErrorNamingTheSource)
{
  std::string err;
  EXPECT_FALSE (parse_strict ("{\"a\":", "cfg.json", &err));
  EXPECT_EQ (err.rfind ("cfg.json: not valid JSON: ", 0), 0u) << err;
  EXPECT_FALSE (parse_strict ("", "cfg.json", &err));
  EXPECT_FALSE (load_strict ("/nonexistent/cfg.json", &err));
  EXPECT_NE (err.find ("/nonexistent/cfg.json: cannot open"), std::string::npos) << err;
}

TEST (Json, FloatsMustBeFiniteAndFitFloat32)
{
  std::string err;
  float f = 0;
  auto v = parse_strict (R"([1e39, -1e39, 3.4e38, "1", null, true, 1e400])", "t", &err);
  /* nlohmann refuses 1e400 itself (it does not fit a double). */
  EXPECT_FALSE (v);
  v = parse_strict (R"([1e39, -1e39, 3.4e38, "1", null, true])", "t", &err);
  ASSERT_TRUE (v) << err;
  EXPECT_FALSE (to_float ((*v)[0], "x", &f, &err));
  EXPECT_NE (err.find ("x is not a finite float"), std::string::npos) << err;
  EXPECT_FALSE (to_float ((*v)[1], "x", &f, &err));
  EXPECT_TRUE (to_float ((*v)[2], "x", &f, &err)) << err;
  EXPECT_EQ (f, 3.4e38f);
  for (int i = 3; i < 6; i++) {
    EXPECT_FALSE (to_float ((*v)[i], "x", &f, &err));
    EXPECT_NE (err.find ("x is not a number"), std::string::npos) << err;
  }
  std::vector<float> out{7.0f};
  EXPECT_FALSE (to_float_array (*v, "\"v\"", &out, &err));
  EXPECT_NE (err.find ("\"v\"[0]"), std::string::npos) << err;
  EXPECT_EQ (out, std::vector<float>{7.0f}) << "left untouched on failure";
}

/* Issue 25: a 40 kB file of "[[[...]]]" cost pi0-robotsim 464 MB (a path string per open
 * level). Nesting is bounded before parsing, and a duplicate key deep down is still named with
 * its path. */
TEST (Json, DeepNestingIsRefusedBeforeItIsParsed)
{
  std::string err;
  const std::string deep = std::string (200000, '[') + std::string (200000, ']');
  EXPECT_FALSE (parse_strict (deep, "deep.json", &err));
  EXPECT_NE (err.find ("deep.json: arrays and objects nested more than 64 deep (at byte 64)"),
             std::string::npos)
      << err;
  /* Objects count too; brackets inside strings do not. */
  std::string objs;
  for (int i = 0; i < 65; i++)
    objs += "{\"a\":";
  objs += "1" + std::string (65, '}');
  EXPECT_FALSE (parse_strict (objs, "o.json", &err));
  EXPECT_NE (err.find ("nested more than 64 deep"), std::string::npos) << err;
  const std::string in_string = "{\"k\":\"" + std::string (1000, '[') + "\"}";
  EXPECT_TRUE (parse_strict (in_string, "s.json", &err)) << err;
  /* 64 levels are fine, and a duplicate at depth 64 is named by its whole path. */
  std::string ok, path;
  for (int i = 0; i < 63; i++) {
    ok += "{\"k" + std::to_string (i) + "\":";
    path += "/k" + std::to_string (i);
  }
  ok += "{\"d\":1,\"d\":2}" + std::string (63, '}');
  EXPECT_FALSE (parse_strict (ok, "ok.json", &err));
  EXPECT_NE (err.find ("the key 'd' more than once (at " + path + ")"), std::string::npos) << err;
  /* An escaped quote does not end a string. */
  EXPECT_TRUE (parse_strict ("[\"\\\"[[[[\"]", "e.json", &err)) << err;
}

/* load_strict reads through pi0::read_regular_file: what is not a small regular file is refused
 * with the real reason (tests/libs/common/test_file.cpp), and an empty file is not JSON. */
TEST (Json, LoadStrictReadsOnlyRegularFiles)
{
  pi0test::TempDir d ("pi0-json");
  const std::string fifo = d.path () + "/fifo";
  ASSERT_EQ (mkfifo (fifo.c_str (), 0600), 0);
  std::string err;
  EXPECT_FALSE (load_strict (fifo, &err));
  EXPECT_EQ (err, fifo + ": is a FIFO, not a regular file");
  std::ofstream (d.path () + "/empty.json");
  EXPECT_FALSE (load_strict (d.path () + "/empty.json", &err));
  EXPECT_EQ (err.rfind (d.path () + "/empty.json: not valid JSON: ", 0), 0u) << err;
}
