/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* common/pi0json: the project's one JSON reader. */
#include "pi0json.h"

#include <gtest/gtest.h>

#include <cstdio>

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
