/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0servesink: observations that reach it without actions are answered with an error. */

#include "tests/pi0testservechain.h"

using namespace pi0test;
using namespace pi0test::servechain;

TEST (Pi0ServeSink, SinkAnswersErrorsForObservationsWithoutActions)
{
  /* No pi0infer: every observation reaches the sink without actions, and each client must hear
   * so instead of waiting forever. */
  if (!have_openpi_client ())
    GTEST_SKIP () << "no .venv with openpi-client";
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch ("pi0servesrc port=0 server=noactions ! cudaprep width=32 "
                                        "height=32 ! pi0servesink name=sink",
                                        &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  gst_element_get_state (pipe.get (), nullptr, nullptr, 10 * GST_SECOND);
  ObjectPtr<GstElement> src (find_factory (pipe.get (), "pi0servesrc"));
  ObjectPtr<GstElement> sink (find_factory (pipe.get (), "pi0servesink"));
  ASSERT_TRUE (src && sink);
  int port = 0;
  g_object_get (src.get (), "bound-port", &port, nullptr);
  auto r = run_clients ("one", port, {"--requests", "1"});
  EXPECT_FALSE (r.ok);
  EXPECT_NE (r.out.find ("the policy gave no actions"), std::string::npos) << r.out;
  EXPECT_TRUE (all_gone (src.get ()));
  EXPECT_EQ (stat_of (sink.get (), "no-actions"), 1u);
  EXPECT_EQ (stat_of (sink.get (), "replies"), 0u);
}
