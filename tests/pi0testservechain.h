/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the tests of the policy server as a chain share (pipelines/serve.txt, pi0servesrc,
 * pi0servesink): the launch line, the elements' stats, the bus, a served pipeline and the camera
 * path's chunk for the same observation. */
#pragma once

#include "common/pi0json.h"
#include "serve/pi0mapping.h"
#include "tests/pi0testgst.h"
#include "tests/pi0testlaunch.h"
#include "tests/pi0testleaks.h"
#include "tests/pi0testserve.h"
#include "tools/common/pi0elementstats.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/wait.h>


namespace pi0test::servechain
{

/* An element's stats field, 0 when absent (the tools' reading of it). */
using pi0::tools::stat_u64;
inline guint64
stat_of (GstElement *e, const char *field)
{
  return stat_u64 (e, field);
}

/* The server's side of "every client has gone". */
inline bool
all_gone (GstElement *src)
{
  for (int i = 0; i < 600; i++) {
    if (stat_of (src, "open") == 0 && stat_of (src, "peers") == 0 && stat_of (src, "queued") == 0)
      return true;
    g_usleep (50000);
  }
  return false;
}

/* The first error on @pipe's bus, or "". */
inline std::string
bus_error (GstElement *pipe)
{
  std::string error;
  pi0::tools::pop_error (pipe, &error);
  return error;
}

/* serve.txt running on a free port; nullptr (and a failure) if it does not start. */
struct Served {
  ElementPtr pipe;
  ObjectPtr<GstElement> src, sink;
  int port = 0;
};

inline Served
serve (const std::string &mapping,
       const std::vector<std::pair<std::string, std::string>> &extra = {})
{
  Served s;
  LineVars vars (extra.begin (), extra.end ());
  vars["SERVE_PORT"] = "0";
  vars["SERVE_MAPPING"] = mapping;
  s.pipe.reset (launch_line (pipeline_line ("serve"), vars));
  if (!s.pipe)
    return s;
  s.src.reset (find_factory (s.pipe.get (), "pi0servesrc"));
  s.sink.reset (find_factory (s.pipe.get (), "pi0servesink"));
  EXPECT_TRUE (s.src && s.sink);
  if (gst_element_set_state (s.pipe.get (), GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    ADD_FAILURE () << "serve.txt does not start: " << bus_error (s.pipe.get ());
    s.pipe.reset ();
    return s;
  }
  GstState state;
  gst_element_get_state (s.pipe.get (), &state, nullptr, 60 * GST_SECOND);
  EXPECT_EQ (state, GST_STATE_PLAYING);
  g_object_get (s.src.get (), "bound-port", &s.port, nullptr);
  EXPECT_GT (s.port, 0);
  return s;
}

class PipelinesServe : public ::testing::Test
{
protected:
  void SetUp () override
  {
    if (!have_openpi_client ())
      GTEST_SKIP () << "no .venv with openpi-client (scripts/setup.sh installs it)";
  }
};

/* ---- The camera path as the oracle ---- */

struct Recorded {
  std::vector<std::string> view_files; /* "" when the view was not sent */
  std::vector<int> widths, heights;
  std::vector<float> state;
  std::string prompt;
  std::vector<float> actions;
  int horizon = 0, dim = 0;
};

inline std::vector<Recorded>
read_recorded (const std::string &dir)
{
  std::vector<Recorded> out;
  std::string err;
  auto index = pi0::json::load_strict (dir + "/index.json", &err);
  EXPECT_TRUE (index) << err;
  if (!index)
    return out;
  for (const auto &e : *index) {
    Recorded r;
    for (const auto &v : e["views"]) {
      r.view_files.push_back (v.is_null () ? "" : dir + "/" + v["file"].get<std::string> ());
      r.widths.push_back (v.is_null () ? 0 : v["width"].get<int> ());
      r.heights.push_back (v.is_null () ? 0 : v["height"].get<int> ());
    }
    for (const auto &x : e["state"])
      r.state.push_back (x.get<float> ());
    r.prompt = e["prompt"].get<std::string> ();
    r.horizon = e["horizon"].get<int> ();
    r.dim = e["dim"].get<int> ();
    gchar *data = nullptr;
    gsize len = 0;
    const std::string af = dir + "/" + e["actions_file"].get<std::string> ();
    EXPECT_TRUE (g_file_get_contents (af.c_str (), &data, &len, nullptr)) << af;
    r.actions.resize (len / 4);
    if (data)
      memcpy (r.actions.data (), data, len / 4 * 4);
    g_free (data);
    out.push_back (r);
  }
  return out;
}

/* A packed RGB file as a GStreamer RGB frame (rows padded to 4 bytes, as the caps say). */
inline GstBuffer *
rgb_frame (const std::string &file, int w, int h)
{
  gchar *data = nullptr;
  gsize len = 0;
  EXPECT_TRUE (g_file_get_contents (file.c_str (), &data, &len, nullptr)) << file;
  EXPECT_EQ (len, (gsize)w * h * 3);
  GstVideoInfo info;
  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_RGB, w, h);
  GstBuffer *b = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr);
  GstMapInfo map;
  gst_buffer_map (b, &map, GST_MAP_WRITE);
  for (int y = 0; y < h && data; y++)
    memcpy (map.data + (size_t)y * GST_VIDEO_INFO_PLANE_STRIDE (&info, 0), data + (size_t)y * w * 3,
            (size_t)w * 3);
  gst_buffer_unmap (b, &map);
  g_free (data);
  GST_BUFFER_PTS (b) = 0;
  GST_BUFFER_DURATION (b) = 100 * GST_MSECOND;
  return b;
}

/* The chunk the camera path makes for one recorded request: its views as three cameras (a view
 * that was not sent is a camera with no frame), its state on the state pad, its prompt as the
 * instruction, and seed = the request's number (the server's seed is 0). */
inline std::vector<float>
camera_path (const Recorded &r, guint64 seed, int *horizon, int *dim)
{
  std::ostringstream line;
  line << "pi0viewmux name=mux ! cudaprep width=32 height=32 ! pi0infer model=builtin:pi0-tiny "
          "seed="
       << seed << " name=infer ! appsink name=out sync=false ";
  for (int v = 0; v < 3; v++)
    if (!r.view_files[v].empty ())
      line << "appsrc name=v" << v
           << " format=time caps=video/x-raw,format=RGB,width=" << r.widths[v]
           << ",height=" << r.heights[v] << ",framerate=10/1 ! mux." << pi0::kViewNames[v] << " ";
  line << "appsrc name=st format=time caps=application/x-pi0-state,dim=" << r.state.size ()
       << " ! mux.state";
  std::string error;
  const ElementPtr pipe = pi0::tools::launch (line.str (), &error);
  EXPECT_TRUE (pipe) << error;
  if (!pipe)
    return {};
  GstElement *infer = gst_bin_get_by_name (GST_BIN (pipe.get ()), "infer");
  g_object_set (infer, "instruction", r.prompt.c_str (), nullptr);
  gst_object_unref (infer);
  EXPECT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  for (int v = 0; v < 3; v++) {
    if (r.view_files[v].empty ())
      continue;
    GstElement *src =
        gst_bin_get_by_name (GST_BIN (pipe.get ()), ("v" + std::to_string (v)).c_str ());
    gst_app_src_push_buffer (GST_APP_SRC (src),
                             rgb_frame (r.view_files[v], r.widths[v], r.heights[v]));
    gst_app_src_end_of_stream (GST_APP_SRC (src));
    gst_object_unref (src);
  }
  GstElement *st = gst_bin_get_by_name (GST_BIN (pipe.get ()), "st");
  GstBuffer *sb = gst_buffer_new_memdup (r.state.data (), r.state.size () * sizeof (float));
  GST_BUFFER_PTS (sb) = 0;
  gst_app_src_push_buffer (GST_APP_SRC (st), sb);
  gst_app_src_end_of_stream (GST_APP_SRC (st));
  gst_object_unref (st);

  GstElement *out = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  GstSample *sample = gst_app_sink_try_pull_sample (GST_APP_SINK (out), 120 * GST_SECOND);
  gst_object_unref (out);
  std::vector<float> actions;
  EXPECT_NE (sample, nullptr) << "the camera path made no observation: " << bus_error (pipe.get ());
  if (sample) {
    GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (gst_sample_get_buffer (sample));
    EXPECT_NE (am, nullptr);
    if (am) {
      *horizon = (int)am->horizon;
      *dim = (int)am->dim;
      actions.assign (am->actions, am->actions + (size_t)am->horizon * am->dim);
    }
    gst_sample_unref (sample);
  }
  return actions;
}

} // namespace pi0test::servechain
