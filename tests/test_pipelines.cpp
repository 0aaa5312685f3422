/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Every pipelines/NAME.txt line parses; each one whose `# needs:` line says `nothing` runs for
 * a few seconds (or to EOS) without an error and delivers observations to its sinks. */

#include "test_helpers.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace pi0test;

namespace
{

struct PipelineFile {
  std::string name, line, needs;
};

std::vector<PipelineFile>
load_pipelines ()
{
  std::vector<PipelineFile> out;
  const char *root = g_getenv ("PI0_SOURCE_ROOT");
  if (!root)
    return out;
  std::string dir = std::string (root) + "/pipelines";
  GDir *d = g_dir_open (dir.c_str (), 0, nullptr);
  if (!d)
    return out;
  while (const gchar *f = g_dir_read_name (d)) {
    if (!g_str_has_suffix (f, ".txt"))
      continue;
    std::ifstream in (dir + "/" + f);
    PipelineFile p{f, "", "nothing"};
    std::string l;
    while (std::getline (in, l)) {
      if (l.rfind ("# needs:", 0) == 0) {
        gchar *needs = g_strstrip (g_strdup (l.substr (8).c_str ()));
        p.needs = needs;
        g_free (needs);
      } else if (!l.empty () && l[0] != '#')
        p.line += l + " ";
    }
    out.push_back (p);
  }
  g_dir_close (d);
  return out;
}

} // namespace

class Pipelines : public ::testing::TestWithParam<PipelineFile>
{
};

TEST (PipelinesDir, HasPipelines)
{
  EXPECT_GE (load_pipelines ().size (), 1u) << "PI0_SOURCE_ROOT/pipelines has no *.txt";
}

TEST_P (Pipelines, ParsesAndRuns)
{
  const PipelineFile &p = GetParam ();
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launch (p.line.c_str (), &err));
  if (err && g_error_matches (err, GST_PARSE_ERROR, GST_PARSE_ERROR_NO_SUCH_ELEMENT) &&
      p.needs != "nothing") {
    std::string msg = err->message;
    g_clear_error (&err);
    GTEST_SKIP () << p.name << " needs " << p.needs << ": " << msg;
  }
  ASSERT_EQ (err, nullptr) << p.name << ": " << err->message;
  ASSERT_NE (pipe, nullptr);
  if (p.needs != "nothing")
    GTEST_SKIP () << p.name << " parses; running it needs " << p.needs;

  /* Count observations reaching every sink; keep fakesink quiet. */
  SinkCounts n;
  watch_sinks (pipe.get (), &n);

  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  GstBus *bus = gst_element_get_bus (pipe.get ());
  MessagePtr msg (gst_bus_timed_pop_filtered (
      bus, 3 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR)));
  gst_object_unref (bus);
  if (msg && GST_MESSAGE_TYPE (msg.get ()) == GST_MESSAGE_ERROR)
    FAIL () << p.name << ": " << message_text (msg.get ());
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
  EXPECT_GT (n.observations.load (), 0) << p.name << ": no observation reached a sink";
  /* A line with the policy in it must deliver action chunks. */
  if (p.line.find ("pi0infer") != std::string::npos) {
    EXPECT_GT (n.actions.load (), 0) << p.name << ": no action chunk reached a sink";
  }
}

INSTANTIATE_TEST_SUITE_P (All, Pipelines, ::testing::ValuesIn (load_pipelines ()),
                          [] (const ::testing::TestParamInfo<PipelineFile> &info) {
                            std::string n = info.param.name;
                            for (auto &c : n)
                              if (!g_ascii_isalnum (c))
                                c = '_';
                            return n;
                          });
