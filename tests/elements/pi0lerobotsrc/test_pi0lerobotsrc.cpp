/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0lerobotsrc: missing datasets and episodes, datasets the real lerobot wrote played back,
 * failing decoders, hostile datasets (clear errors naming the field, never an abort or a hang). */

#include "tests/pi0testlerobot.h"

namespace fs = std::filesystem;
using namespace pi0test;
using namespace pi0test::lerobot;

/* A dataset of tiny_schema() with one episode of one frame (no cameras) at @path. */
static testing::AssertionResult
one_frame_dataset (const std::string &path)
{
  std::string e;
  auto w = pi0::lerobot::Writer::open (path, tiny_schema (), false, &e);
  if (!w)
    return testing::AssertionFailure () << e;
  pi0::lerobot::Episode ep;
  ep.length = 1;
  ep.state = {1, 2};
  ep.action = {1, 2};
  ep.task = {"t"};
  if (!w->commit (ep, &e))
    return testing::AssertionFailure () << e;
  return testing::AssertionSuccess ();
}

TEST (Pi0LeRobotSrc, AMissingDatasetOrEpisodeIsAnErrorNamingIt)
{
  TempDir d;
  for (int missing_episode = 0; missing_episode < 2; missing_episode++) {
    if (missing_episode) {
      /* A dataset with one episode (no cameras), asked for episode 5. */
      ASSERT_TRUE (one_frame_dataset (d.path () + "/ds"));
    }
    ElementPtr src (gst_element_factory_make ("pi0lerobotsrc", nullptr));
    ASSERT_NE (src, nullptr);
    g_object_set (src.get (), "location", (d.path () + "/ds").c_str (), "episode", 5u, nullptr);
    ElementPtr pipe (gst_pipeline_new (nullptr));
    gst_bin_add (GST_BIN (pipe.get ()), GST_ELEMENT (gst_object_ref (src.get ())));
    EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    GstBus *bus = gst_element_get_bus (pipe.get ());
    MessagePtr m (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
    gst_object_unref (bus);
    ASSERT_NE (m, nullptr);
    const std::string t = message_text (m.get ());
    EXPECT_NE (t.find (missing_episode ? "no episode 5" : "info.json"), std::string::npos) << t;
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
  }
}

/* Setting location reads nothing (a set_property never touches the disk): the dataset is read
 * at READY, where its pads appear and n-episodes is known, and they go again at NULL. */
TEST (Pi0LeRobotSrc, TheDatasetIsReadAtReadyNotWhenLocationIsSet)
{
  TempDir d;
  ASSERT_TRUE (one_frame_dataset (d.path () + "/ds"));

  ElementPtr src (gst_element_factory_make ("pi0lerobotsrc", nullptr));
  ASSERT_NE (src, nullptr);
  g_object_set (src.get (), "location", (d.path () + "/ds").c_str (), nullptr);
  guint n = 99;
  g_object_get (src.get (), "n-episodes", &n, nullptr);
  EXPECT_EQ (n, 0u) << "not read yet";
  EXPECT_EQ (src->numsrcpads, 0u);
  ASSERT_EQ (gst_element_set_state (src.get (), GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  g_object_get (src.get (), "n-episodes", &n, nullptr);
  EXPECT_EQ (n, 1u);
  ObjectPtr<GstPad> state (gst_element_get_static_pad (src.get (), "state"));
  EXPECT_NE (state, nullptr) << "the state pad appears at READY";
  ASSERT_EQ (gst_element_set_state (src.get (), GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  EXPECT_EQ (src->numsrcpads, 0u);

  /* A location that names nothing is no warning when set, an error at READY. */
  g_object_set (src.get (), "location", (d.path () + "/none").c_str (), nullptr);
  ElementPtr pipe (gst_pipeline_new (nullptr));
  gst_bin_add (GST_BIN (pipe.get ()), GST_ELEMENT (gst_object_ref (src.get ())));
  EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_READY), GST_STATE_CHANGE_FAILURE);
  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  MessagePtr m (gst_bus_pop_filtered (bus.get (), GST_MESSAGE_ERROR));
  ASSERT_NE (m, nullptr);
  EXPECT_NE (message_text (m.get ()).find ("Cannot read the dataset"), std::string::npos);
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
}

/* The instruction in effect at each state buffer (the pi0-instruction events before it), a
 * line each, into a file. */
struct TaskPerState {
  std::string path, current; /* touched on the state pad's streaming thread only */
};

static GstPadProbeReturn
write_task_per_state (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  TaskPerState *t = static_cast<TaskPerState *> (user_data);
  if (GST_PAD_PROBE_INFO_TYPE (info) & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    const gchar *text = nullptr;
    if (gst_pi0_instruction_event_parse (GST_PAD_PROBE_INFO_EVENT (info), &text))
      t->current = text;
  } else if (GST_PAD_PROBE_INFO_TYPE (info) & GST_PAD_PROBE_TYPE_BUFFER) {
    std::ofstream (t->path, std::ios::app) << t->current << "\n";
  }
  return GST_PAD_PROBE_OK;
}

/* Datasets the real lerobot wrote (LeRobotDataset.create + add_frame + save_episode: every
 * episode of a camera in one MP4, H.264 and LeRobot's default AV1): every episode plays, each
 * of its frames byte for byte the frame LeRobot's decoder selects for it, its state rows, and
 * before them the instruction LeRobot gives each frame as its task (episode 2 changes task at
 * its frame 5). */
TEST (Pi0LeRobotSrc, PlaysEveryEpisodeOfDatasetsLeRobotWrote)
{
  REQUIRE_LEROBOT_PYTHON (py, "play datasets the real lerobot wrote");
  TempDir dir;
  const std::string tool = source_root () + "/tests/lerobot/lerobot_made.py";
  for (const char *codec : {"h264", "libsvtav1"}) {
    SCOPED_TRACE (codec);
    const std::string root = dir.path () + "/" + codec;
    std::string out;
    ASSERT_TRUE (lerobot_made (py, dir.path (), root,
                               {"--codec", codec, "--lengths", "7,12,9", "--task-change"}));
    for (guint e = 0; e < 3; e++) {
      SCOPED_TRACE (e);
      const std::string dump = dir.path () + "/" + codec + "-played/" + std::to_string (e);
      fs::create_directories (dump);
      const std::string line =
          "pi0lerobotsrc name=ds location=" + root + " episode=" + std::to_string (e) +
          " ds.main ! video/x-raw,format=I420 ! filesink location=" + dump +
          "/main.yuv ds.state ! filesink name=st location=" + dump + "/state.f32";
      std::string parse_error;
      ElementPtr pipe = pi0::tools::launch (line, &parse_error);
      ASSERT_TRUE (pipe) << parse_error;
      TaskPerState tasks{dump + "/task.txt", ""};
      {
        ObjectPtr<GstElement> st (by_name (pipe.get (), "st"));
        ObjectPtr<GstPad> pad (gst_element_get_static_pad (st.get (), "sink"));
        gst_pad_add_probe (
            pad.get (),
            (GstPadProbeType)(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
            write_task_per_state, &tasks, nullptr);
      }
      ASSERT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
      EXPECT_EQ (run_to_eos (pipe.get (), 60), "") << "every episode ends, the last and the others";
      gst_element_set_state (pipe.get (), GST_STATE_NULL);
    }
    EXPECT_EQ (run ({py, tool, "check", root, dir.path () + "/" + codec + "-played"}, &out,
                    python_env (dir.path ())),
               0)
        << out;
    /* Many more, one after the other in this process: a camera branch whose decodebin started
     * before its videoconvert was ready stalled for good, with no error and no EOS (about once
     * in 75 pipelines here before the fix; 3,900 in a row since). */
    for (guint k = 0; k < 60; k++) {
      const std::string line = "pi0lerobotsrc name=ds location=" + root +
                               " episode=" + std::to_string (k % 3) +
                               " ds.main ! fakesink ds.state ! fakesink";
      std::string parse_error;
      ElementPtr pipe = pi0::tools::launch (line, &parse_error);
      ASSERT_TRUE (pipe) << parse_error;
      gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
      const std::string ended = run_to_eos (pipe.get (), 60);
      gst_element_set_state (pipe.get (), GST_STATE_NULL);
      ASSERT_EQ (ended, "") << "play " << k << " (episode " << k % 3 << ") did not end";
    }
  }
}

/* A stand-in AV1 decoder, ranked above the installed ones while a test needs it: gray I420
 * frames at the input's size and PTS. With fail_after_eos, when a frame it pushes is answered
 * GST_FLOW_EOS it then fails as libaom's av1dec now and then does there ("Failed to decode
 * frame", an element error, GST_FLOW_ERROR upstream); with fail_at = N it fails on frame N. */
struct FakeAv1Dec {
  GstElement parent;
  GstPad *sink, *src;
  int width, height, n;
};
struct FakeAv1DecClass {
  GstElementClass parent;
};
static int fake_fail_at = -1;
static bool fake_fail_after_eos = false;
GType fake_av1_dec_get_type (void);
G_DEFINE_TYPE (FakeAv1Dec, fake_av1_dec, GST_TYPE_ELEMENT)

static GstStaticPadTemplate fake_sink_t =
    GST_STATIC_PAD_TEMPLATE ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS ("video/x-av1"));
static GstStaticPadTemplate fake_src_t = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS ("video/x-raw,format=I420"));

static gboolean
fake_av1_dec_event (GstPad *pad, GstObject *parent, GstEvent *ev)
{
  FakeAv1Dec *d = (FakeAv1Dec *)parent;
  if (GST_EVENT_TYPE (ev) == GST_EVENT_CAPS) {
    GstCaps *in;
    gst_event_parse_caps (ev, &in);
    const GstStructure *st = gst_caps_get_structure (in, 0);
    gint fn = 30, fd = 1;
    gst_structure_get_int (st, "width", &d->width);
    gst_structure_get_int (st, "height", &d->height);
    gst_structure_get_fraction (st, "framerate", &fn, &fd);
    GstCaps *out = gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING, "I420", "width",
                                        G_TYPE_INT, d->width, "height", G_TYPE_INT, d->height,
                                        "framerate", GST_TYPE_FRACTION, fn, fd, nullptr);
    gst_event_unref (ev);
    const gboolean ok = gst_pad_push_event (d->src, gst_event_new_caps (out));
    gst_caps_unref (out);
    return ok;
  }
  return gst_pad_event_default (pad, parent, ev);
}

static GstFlowReturn
fake_av1_dec_chain (GstPad *, GstObject *parent, GstBuffer *in)
{
  FakeAv1Dec *d = (FakeAv1Dec *)parent;
  const int k = d->n++;
  if (k == fake_fail_at) {
    gst_buffer_unref (in);
    GST_ELEMENT_ERROR (d, LIBRARY, INIT, ("Failed to decode frame"), ("stand-in, frame %d", k));
    return GST_FLOW_ERROR;
  }
  const gsize size = (gsize)d->width * d->height * 3 / 2;
  GstBuffer *out = gst_buffer_new_allocate (nullptr, size, nullptr);
  gst_buffer_memset (out, 0, 128, size);
  GST_BUFFER_PTS (out) = GST_BUFFER_PTS (in);
  GST_BUFFER_DURATION (out) = GST_BUFFER_DURATION (in);
  gst_buffer_unref (in);
  const GstFlowReturn ret = gst_pad_push (d->src, out);
  if (ret == GST_FLOW_EOS && fake_fail_after_eos) {
    GST_ELEMENT_ERROR (d, LIBRARY, INIT, ("Failed to decode frame"), ("stand-in, after EOS"));
    return GST_FLOW_ERROR;
  }
  return ret;
}

static void
fake_av1_dec_init (FakeAv1Dec *d)
{
  d->width = d->height = 16;
  d->n = 0;
  d->sink = gst_pad_new_from_static_template (&fake_sink_t, "sink");
  gst_pad_set_chain_function (d->sink, fake_av1_dec_chain);
  gst_pad_set_event_function (d->sink, fake_av1_dec_event);
  GST_PAD_SET_PROXY_ALLOCATION (d->sink);
  gst_element_add_pad (GST_ELEMENT (d), d->sink);
  d->src = gst_pad_new_from_static_template (&fake_src_t, "src");
  gst_pad_use_fixed_caps (d->src);
  gst_element_add_pad (GST_ELEMENT (d), d->src);
}

static void
fake_av1_dec_class_init (FakeAv1DecClass *klass)
{
  GstElementClass *ec = GST_ELEMENT_CLASS (klass);
  gst_element_class_add_static_pad_template (ec, &fake_sink_t);
  gst_element_class_add_static_pad_template (ec, &fake_src_t);
  gst_element_class_set_static_metadata (ec, "stand-in AV1 decoder", "Codec/Decoder/Video",
                                         "Gray frames; fails where a test says", "gst-pi0 tests");
}

/* Plays episode @episode of @root's camera `main` with the stand-in decoder; @frames: how
 * many frames came out. */
static std::string
play_with_fake_decoder (const std::string &root, guint episode, int *frames)
{
  GstPluginFeature *f = GST_PLUGIN_FEATURE (gst_element_factory_find ("pi0testfakeav1dec"));
  gst_plugin_feature_set_rank (f, GST_RANK_PRIMARY + 1000);
  const std::string line = "pi0lerobotsrc name=ds location=" + root +
                           " episode=" + std::to_string (episode) +
                           " ds.main ! fakesink name=v signal-handoffs=true ds.state ! fakesink";
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (line, &parse_error);
  if (!pipe)
    return parse_error;
  *frames = 0;
  ObjectPtr<GstElement> v (by_name (pipe.get (), "v"));
  g_signal_connect (
      v.get (), "handoff",
      G_CALLBACK (+[] (GstElement *, GstBuffer *, GstPad *, gpointer n) { ++*(int *)n; }), frames);
  /* Every error posted, also after EOS (the stand-in fails just after the branch's EOS went
   * downstream, and the pipeline's EOS may come first): seen synchronously, counted once the
   * pipeline is back in NULL, its streaming threads joined. */
  std::vector<std::string> errors;
  std::mutex lock;
  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  struct Seen {
    std::vector<std::string> *errors;
    std::mutex *lock;
  } seen{&errors, &lock};
  gst_bus_set_sync_handler (
      bus.get (),
      +[] (GstBus *, GstMessage *m, gpointer p) {
        if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
          Seen *s = (Seen *)p;
          std::lock_guard<std::mutex> g (*s->lock);
          s->errors->push_back (message_text (m));
        }
        return GST_BUS_PASS;
      },
      &seen, nullptr);
  gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
  std::string result = run_to_eos (pipe.get (), 60);
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
  gst_bus_set_sync_handler (bus.get (), nullptr, nullptr, nullptr);
  gst_plugin_feature_set_rank (f, GST_RANK_NONE);
  gst_object_unref (f);
  for (auto &e : errors)
    if (result.find (e) == std::string::npos)
      result += (result.empty () ? "" : " ; ") + e;
  return result;
}

/* Once the episode's frames are out, the camera's upstream is told to stop (GST_FLOW_EOS) and
 * the rest of the file is not decoded; a decoder that fails on learning it (libaom's av1dec did,
 * about one run in fifty, and failed CI) does not fail the pipeline: the episode ends with
 * EOS and all its frames. An error before then is the pipeline's, as ever (the control). */
TEST (Pi0LeRobotSrc, ADecoderFailingAfterTheEpisodeEndedDoesNotFailIt)
{
  REQUIRE_LEROBOT_PYTHON (py, "play datasets the real lerobot wrote");
  ASSERT_TRUE (
      gst_element_register (nullptr, "pi0testfakeav1dec", GST_RANK_NONE, fake_av1_dec_get_type ()));
  TempDir dir;
  const std::string root = dir.path () + "/av1";
  ASSERT_TRUE (
      lerobot_made (py, dir.path (), root, {"--codec", "libsvtav1", "--lengths", "7,12,9"}));
  int frames = -1;
  fake_fail_after_eos = true;
  fake_fail_at = -1;
  EXPECT_EQ (play_with_fake_decoder (root, 0, &frames), "");
  EXPECT_EQ (frames, 7) << "episode 0's frames, then EOS";
  EXPECT_EQ (play_with_fake_decoder (root, 1, &frames), "");
  EXPECT_EQ (frames, 12);
  /* The control: the same failure inside the episode (file frame 3 is episode 0's fourth). */
  fake_fail_after_eos = false;
  fake_fail_at = 3;
  const std::string e = play_with_fake_decoder (root, 0, &frames);
  EXPECT_NE (e.find ("Failed to decode frame"), std::string::npos) << e;
  EXPECT_EQ (frames, 3);
  fake_fail_at = -1;
}

/* Damaged and hostile copies of a dataset LeRobot wrote (tests/lerobot/hostile_datasets.py):
 * each gives an element error naming what is wrong, or plays to its end where it is valid or
 * merely short; never an abort (the test process would die), never a hang (bounded waits).
 * Then append=true onto damaged datasets is refused, naming the damage. */
TEST (Pi0LeRobotSrc, HostileDatasetsGiveErrorsNamingTheFieldNeverAbortsOrHangs)
{
  REQUIRE_LEROBOT_PYTHON (py, "make the hostile datasets from a LeRobot one");
  TempDir dir;
  const std::string good = dir.path () + "/good", cases_dir = dir.path () + "/cases";
  std::string out;
  ASSERT_TRUE (lerobot_made (py, dir.path (), good));
  ASSERT_EQ (run ({py, source_root () + "/tests/lerobot/hostile_datasets.py", good, cases_dir},
                  &out, python_env (dir.path ())),
             0)
      << out;
  std::string err;
  auto cases = pi0::json::load_strict (cases_dir + "/cases.json", &err);
  ASSERT_TRUE (cases) << err;
  ASSERT_GE (cases->size (), 20u);
  for (auto &c : *cases) {
    const std::string name = c["name"].get<std::string> ();
    const std::string expect = c["expect"].get<std::string> ();
    SCOPED_TRACE (name);
    const std::string line = "pi0lerobotsrc name=ds location=" + cases_dir + "/" + name +
                             " episode=" + std::to_string (c["episode"].get<int> ()) +
                             " ds.main ! fakesink ds.state ! fakesink";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (line, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    std::string result;
    if (gst_element_set_state (pipe.get (), GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
      ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
      MessagePtr m (gst_bus_pop_filtered (bus.get (), GST_MESSAGE_ERROR));
      result = m ? message_text (m.get ()) : "the state change failed with no error posted";
    } else {
      result = run_to_eos (pipe.get (), 30);
    }
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    if (expect.empty ())
      EXPECT_EQ (result, "") << "plays to its end";
    else
      EXPECT_NE (result.find (expect), std::string::npos)
          << "expected an error with: " << expect << "\ngot: " << result;
  }

  /* The files that are not whole MP4s through gst-launch-1.0 itself, as a user meets them: it
   * exits at once with the error (an empty video used to hang it, 9 runs of 9). */
  gchar *launch = g_find_program_in_path ("gst-launch-1.0");
  if (launch) {
    for (const char *name : {"video-empty", "video-cut-in-half", "video-not-mp4"}) {
      SCOPED_TRACE (name);
      const std::string location = "location=" + cases_dir + "/" + name;
      const gchar *argv[] = {
          "timeout",         "-k",        "5",       "120", launch,     "pi0lerobotsrc", "name=ds",
          location.c_str (), "episode=1", "ds.main", "!",   "fakesink", "ds.state",      "!",
          "fakesink",        nullptr};
      gchar **env = g_get_environ ();
      for (auto &kv : gst_child_env (dir.path ()))
        env = g_environ_setenv (env, kv.first.c_str (), kv.second.c_str (), TRUE);
      gchar *sout = nullptr, *serr = nullptr;
      gint status = 0;
      const gint64 t0 = g_get_monotonic_time ();
      ASSERT_TRUE (g_spawn_sync (nullptr, const_cast<gchar **> (argv), env, G_SPAWN_SEARCH_PATH,
                                 nullptr, nullptr, &sout, &serr, &status, nullptr));
      const double seconds = (g_get_monotonic_time () - t0) / 1e6;
      g_strfreev (env);
      const std::string text = std::string (sout ? sout : "") + (serr ? serr : "");
      g_free (sout);
      g_free (serr);
      ASSERT_TRUE (WIFEXITED (status)) << text;
      EXPECT_NE (WEXITSTATUS (status), 124) << "gst-launch-1.0 hung (" << seconds << " s)";
      EXPECT_NE (WEXITSTATUS (status), 0) << text;
      EXPECT_NE (text.find ("cannot be played"), std::string::npos) << text;
    }
    g_free (launch);
  }

  /* Appending onto damage. The stream's schema is the undamaged dataset's. */
  auto r = pi0::lerobot::Reader::open (good, &err);
  ASSERT_TRUE (r) << err;
  const pi0::lerobot::Schema schema = r->schema ();
  for (auto kv : std::vector<std::pair<std::string, std::string>>{
           {"data-missing", "is missing"},
           {"video-missing", "is missing"},
           {"length-wrong", "do not span its length"},
           {"total-frames-wrong", "total_frames is 99"},
           {"state-shape-1e12", "outside 1..4096"},
           {"fps-string", "not a number"}}) {
    SCOPED_TRACE (kv.first);
    err.clear ();
    auto w = pi0::lerobot::Writer::open (cases_dir + "/" + kv.first, schema, true, &err);
    EXPECT_EQ (w, nullptr);
    EXPECT_NE (err.find (kv.second), std::string::npos) << err;
    EXPECT_EQ (err.find ("vector::"), std::string::npos) << err;
  }
  /* And the undamaged one is appended to. */
  err.clear ();
  EXPECT_NE (pi0::lerobot::Writer::open (good, schema, true, &err), nullptr) << err;
}

/* Through pi0viewmux, the dataset's tasks reach pi0infer as instructions, in the order the
 * episode changes them; with send-instruction=false pi0infer keeps its own. */
TEST (Pi0LeRobotSrc, TheTasksReachPi0InferThroughTheViewMux)
{
  REQUIRE_LEROBOT_PYTHON (py, "make the dataset with the real lerobot");
  TempDir dir;
  const std::string root = dir.path () + "/ds";
  ASSERT_TRUE (lerobot_made (py, dir.path (), root, {"--lengths", "7,12,9", "--task-change"}));
  for (bool send : {true, false}) {
    SCOPED_TRACE (send);
    const std::string line =
        "pi0lerobotsrc name=ds location=" + root +
        " episode=2 send-instruction=" + (send ? "true" : "false") +
        " pi0viewmux name=mux ! cudaprep width=32 height=32 ! queue ! pi0infer name=inf "
        "model=builtin:pi0-tiny instruction=other action-dims=7 ! fakesink "
        "ds.main ! queue ! mux.main ds.state ! queue ! mux.state";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (line, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    ObjectPtr<GstElement> inf (by_name (pipe.get (), "inf"));
    struct Seen {
      std::mutex lock;
      std::vector<std::string> values;
    } seen;
    g_signal_connect (inf.get (), "notify::instruction",
                      G_CALLBACK (+[] (GObject *o, GParamSpec *, gpointer p) {
                        Seen *s = static_cast<Seen *> (p);
                        gchar *v = nullptr;
                        g_object_get (o, "instruction", &v, nullptr);
                        std::lock_guard<std::mutex> g (s->lock);
                        s->values.push_back (v ? v : "");
                        g_free (v);
                      }),
                      &seen);
    gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
    EXPECT_EQ (run_to_eos (pipe.get (), 60), "");
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    std::lock_guard<std::mutex> g (seen.lock);
    if (send)
      EXPECT_EQ (seen.values, (std::vector<std::string>{"task 0", "task 2"}));
    else
      EXPECT_TRUE (seen.values.empty ()) << seen.values[0];
    gchar *now = nullptr;
    g_object_get (inf.get (), "instruction", &now, nullptr);
    EXPECT_STREQ (now, send ? "task 2" : "other");
    g_free (now);
  }
}
