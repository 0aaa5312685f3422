/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gst/common/pi0notice: what an engine returns for its element to post. The notices keep their
 * order and their details, errors can be demoted to warnings, and posting puts each on the bus
 * as GST_ELEMENT_ERROR / _WARNING / _INFO would, with the engine's words, and empties them. */

#include "gst/common/pi0notice.h"
#include "tests/pi0testgst.h"

#include <gst/gst.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace pi0test;

namespace
{

GstStructure *
details (int n)
{
  return gst_structure_new ("pi0-test", "n", G_TYPE_INT, n, nullptr);
}

} // namespace

TEST (Notices, KeepTheirOrderKindAndDetails)
{
  pi0::Notices n;
  EXPECT_TRUE (n.empty ());
  EXPECT_FALSE (n.has_error ());
  n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT, "first", "why", details (1));
  n.info (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "second");
  n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, "third", "", details (3));
  ASSERT_EQ (n.size (), 3u);
  EXPECT_TRUE (n.has_error ());
  const auto &items = n.items ();
  EXPECT_EQ (items[0].type, GST_MESSAGE_WARNING);
  EXPECT_EQ (items[0].domain, GST_STREAM_ERROR);
  EXPECT_EQ (items[0].code, GST_STREAM_ERROR_FORMAT);
  EXPECT_EQ (items[0].text, "first");
  EXPECT_EQ (items[0].debug, "why");
  ASSERT_NE (items[0].details, nullptr);
  EXPECT_TRUE (gst_structure_has_name (items[0].details, "pi0-test"));
  EXPECT_EQ (items[1].type, GST_MESSAGE_INFO);
  EXPECT_EQ (items[1].details, nullptr);
  EXPECT_EQ (items[2].type, GST_MESSAGE_ERROR);
  EXPECT_EQ (items[2].text, "third");
  /* take() hands them over in order and leaves none. */
  std::vector<pi0::Notice> taken = n.take ();
  EXPECT_TRUE (n.empty ());
  ASSERT_EQ (taken.size (), 3u);
  EXPECT_EQ (taken[1].text, "second");
  n.warning (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "again");
  n.clear ();
  EXPECT_TRUE (n.empty ());
}

TEST (Notices, DemotedErrorsBecomeWarningsAndTheFirstIsReturned)
{
  pi0::Notices n;
  EXPECT_EQ (n.demote_errors (), "");
  n.warning (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "a warning");
  n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED, "the first error");
  n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED, "the second error");
  EXPECT_EQ (n.demote_errors (), "the first error");
  EXPECT_FALSE (n.has_error ());
  for (const pi0::Notice &x : n.items ())
    EXPECT_EQ (x.type, GST_MESSAGE_WARNING) << x.text;
  EXPECT_EQ (n.items ()[1].domain, GST_STREAM_ERROR) << "only the kind changes";
}

TEST (Notices, SpliceAppendsAndEmptiesTheOther)
{
  pi0::Notices a, b;
  a.warning (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "a1");
  b.info (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "b1", "", details (7));
  b.error (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "b2");
  a.splice (b);
  EXPECT_TRUE (b.empty ());
  ASSERT_EQ (a.size (), 3u);
  EXPECT_EQ (a.items ()[1].text, "b1");
  ASSERT_NE (a.items ()[1].details, nullptr) << "details move with their notice";
  EXPECT_EQ (a.items ()[2].text, "b2");
}

TEST (Notices, StrfUsesGLibsFormats)
{
  EXPECT_EQ (pi0::strf ("%s has %d views at %" GST_TIME_FORMAT, "mux", 3,
                        GST_TIME_ARGS (1500 * GST_MSECOND)),
             "mux has 3 views at 0:00:01.500000000");
  EXPECT_EQ (pi0::strf ("%" G_GUINT64_FORMAT, G_MAXUINT64), "18446744073709551615");
}

/* Posted on the element's bus in order, each with its kind, domain, code, text, debug and
 * details, and the notices are gone afterwards (the details belong to the messages). */
TEST (Notices, PostedInOrderAsTheElementWouldPostThem)
{
  ElementPtr pipe (gst_pipeline_new ("p"));
  GstElement *e = gst_element_factory_make ("fakesink", "engine-owner");
  ASSERT_NE (e, nullptr);
  gst_bin_add (GST_BIN (pipe.get ()), e);

  pi0::Notices n;
  n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT, "a warning", "its debug", details (1));
  n.info (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "an info");
  n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, "an error");
  GST_PI0_POST_NOTICES (e, n);
  EXPECT_TRUE (n.empty ());

  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  const GstMessageType kinds[] = {GST_MESSAGE_WARNING, GST_MESSAGE_INFO, GST_MESSAGE_ERROR};
  for (GstMessageType kind : kinds) {
    MessagePtr m (gst_bus_pop_filtered (
        bus.get (), (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_INFO)));
    ASSERT_NE (m, nullptr);
    EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), kind);
    EXPECT_EQ (GST_MESSAGE_SRC (m.get ()), GST_OBJECT (e));
    GError *err = nullptr;
    gchar *debug = nullptr;
    const GstStructure *d = nullptr;
    if (kind == GST_MESSAGE_WARNING) {
      gst_message_parse_warning (m.get (), &err, &debug);
      gst_message_parse_warning_details (m.get (), &d);
      EXPECT_TRUE (g_error_matches (err, GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT));
      EXPECT_STREQ (err->message, "a warning");
      EXPECT_NE (std::string (debug ? debug : "").find ("its debug"), std::string::npos);
      ASSERT_NE (d, nullptr);
      int v = 0;
      EXPECT_TRUE (gst_structure_get_int (d, "n", &v));
      EXPECT_EQ (v, 1);
    } else if (kind == GST_MESSAGE_INFO) {
      gst_message_parse_info (m.get (), &err, &debug);
      EXPECT_TRUE (g_error_matches (err, GST_CORE_ERROR, GST_CORE_ERROR_FAILED));
      EXPECT_STREQ (err->message, "an info");
    } else {
      gst_message_parse_error (m.get (), &err, &debug);
      EXPECT_TRUE (g_error_matches (err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND));
      EXPECT_STREQ (err->message, "an error");
    }
    g_clear_error (&err);
    g_free (debug);
  }
  EXPECT_EQ (gst_bus_pop (bus.get ()), nullptr) << "nothing else was posted";
}
