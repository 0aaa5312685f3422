/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0servesrc: what is wrong with its settings, said when it starts (the source serving real
 * clients is tests/pipelines/test_pipelines_serve.cpp). */

#include "tests/pi0testservechain.h"

using namespace pi0test;
using namespace pi0test::servechain;

TEST (Pi0ServeSrc, StartErrorsSayWhatIsWrong)
{
  struct Case {
    const char *props, *expect;
  } cases[] = {
      {"mapping=robotx", "neither a mapping preset"},
      {"mapping=/nonexistent/map.json", "/nonexistent/map.json"},
      {"host=example.org", "numeric IP address"},
      {"api-key-file=/nonexistent/key", "/nonexistent/key"},
      {"metadata=[1,2]", "metadata"},
  };
  for (const auto &c : cases) {
    std::string line = std::string ("pi0servesrc port=0 ") + c.props + " ! fakesink";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (line, &parse_error);
    ASSERT_TRUE (pipe) << line << ": " << parse_error;
    EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE)
        << line;
    std::string e = bus_error (pipe.get ());
    EXPECT_NE (e.find (c.expect), std::string::npos) << line << " -> " << e;
  }
  /* Two sources with one server name: the second says so. */
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (
      "pi0servesrc port=0 ! fakesink pi0servesrc port=0 ! fakesink", &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  EXPECT_NE (bus_error (pipe.get ()).find ("already running"), std::string::npos);
}
