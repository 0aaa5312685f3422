/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0infer on the CPU: action metas from builtin:pi0-tiny, a checkpoint written by
 * `pi0-model init` and TorchScript modules defined here; seeds, instructions (property and
 * in-stream event), masked views, latency, and every bad input of the issue. */

#include "tests/pi0testenv.h"
#include "tests/pi0testgst.h"

#include <glib/gstdio.h>
#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

using namespace pi0test;

namespace
{

constexpr int TINY = 32; /* pi0-tiny's image size */

std::string
tiny_tokenizer ()
{
  return source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
}

/* One observation as cudaprep would make it: [views,3,size,size] float images from @seed (view
 * @masked_view, if any, masked and filled with @masked_fill), a 7-joint state unless @no_state. */
GstBuffer *
make_observation (guint64 seq, guint64 seed, int views = 3, int size = TINY, int masked_view = -1,
                  float masked_fill = 0.f, bool no_state = false, bool stale_state = false)
{
  GstBuffer *buf = gst_buffer_new ();
  GST_BUFFER_PTS (buf) = seq * 33 * GST_MSECOND;
  GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (buf);
  om->sequence = seq;
  om->observation_time = GST_BUFFER_PTS (buf);
  const char *names[] = {"main", "side", "top", "v3", "v4"};
  for (int v = 0; v < views; v++) {
    GstPi0View *view = gst_pi0_observation_meta_add_view (om, names[v]);
    if (v != masked_view)
      view->flags = GST_PI0_VIEW_FLAG_VALID;
  }
  if (!no_state) {
    const gfloat state[7] = {0.1f, -0.2f, 0.3f, 0.f, 0.5f, -0.6f, 1.f};
    gst_pi0_observation_meta_set_state (om, state, 7, om->observation_time,
                                        stale_state ? GST_PI0_STATE_FLAG_STALE
                                                    : GST_PI0_STATE_FLAG_NONE);
  }

  size_t n = (size_t)views * 3 * size * size;
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new_host (n * sizeof (float));
  float *d = (float *)gst_pi0_tensor_storage_get_data (st);
  GRand *r = g_rand_new_with_seed ((guint32)seed);
  for (size_t i = 0; i < n; i++)
    d[i] = (float)g_rand_double_range (r, -1.0, 1.0);
  g_rand_free (r);
  if (masked_view >= 0) {
    size_t per = (size_t)3 * size * size;
    for (size_t i = 0; i < per; i++)
      d[masked_view * per + i] = masked_fill;
  }
  const gint64 shape[4] = {views, 3, size, size};
  GstPi0TensorMeta *tm = gst_buffer_add_pi0_tensor_meta (buf, st, GST_PI0_DTYPE_FLOAT32, 4, shape);
  gboolean masks[8];
  for (int v = 0; v < views; v++)
    masks[v] = v != masked_view;
  gst_pi0_tensor_meta_set_masks (tm, masks, views);
  gst_pi0_tensor_storage_unref (st);
  return buf;
}

GstElement *
make_infer (const std::string &model, const char *first_prop = nullptr, ...)
{
  GstElement *e = gst_element_factory_make ("pi0infer", nullptr);
  EXPECT_NE (e, nullptr);
  g_object_set (e, "model", model.c_str (), nullptr);
  if (first_prop) {
    va_list args;
    va_start (args, first_prop);
    g_object_set_valist (G_OBJECT (e), first_prop, args);
    va_end (args);
  }
  return e;
}

struct Infer {
  ObjectPtr<GstElement> element;
  HarnessPtr h;
  ObjectPtr<GstBus> bus;
  explicit Infer (GstElement *e, int views = 3) : element (e)
  {
    gst_object_ref_sink (e);
    bus.reset (gst_bus_new ());
    gst_element_set_bus (e, bus.get ());
    h.reset (gst_harness_new_with_element (e, "sink", "src"));
    std::string caps =
        std::string (GST_PI0_OBSERVATION_MEDIA_TYPE) + ",views=(int)" + std::to_string (views);
    gst_harness_set_src_caps_str (h.get (), caps.c_str ());
  }
  ~Infer ()
  {
    h.reset ();
    gst_element_set_bus (element.get (), nullptr);
  }
  /* Pushes one observation and returns its actions ([] when it got none). */
  std::vector<float> run (GstBuffer *obs, GstPi0ActionMeta *out_meta = nullptr,
                          GstFlowReturn *ret = nullptr)
  {
    GstFlowReturn r = gst_harness_push (h.get (), obs);
    if (ret)
      *ret = r;
    std::vector<float> v;
    if (r != GST_FLOW_OK)
      return v;
    BufferPtr out (gst_harness_pull (h.get ()));
    EXPECT_NE (out, nullptr);
    if (!out)
      return v;
    GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (out.get ());
    if (!am)
      return v;
    if (out_meta)
      *out_meta = *am; /* scalar fields only; actions are copied below */
    v.assign (am->actions, am->actions + (size_t)am->horizon * am->dim);
    if (out_meta) {
      out_meta->actions = nullptr;
      out_meta->model_id = nullptr;
    }
    return v;
  }
};

/* start() fails: returns the error message posted. */
MessagePtr
start_error (GstElement *e)
{
  ObjectPtr<GstElement> el (e);
  gst_object_ref_sink (e);
  ObjectPtr<GstBus> bus (gst_bus_new ());
  gst_element_set_bus (e, bus.get ());
  EXPECT_EQ (gst_element_set_state (e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  gst_element_set_state (e, GST_STATE_NULL);
  MessagePtr m (gst_bus_pop_filtered (bus.get (), GST_MESSAGE_ERROR));
  gst_element_set_bus (e, nullptr);
  return m;
}

/* The TorchScript policies of tests/scripted_policies.py (scripted by .venv's torch, whose
 * LibTorch the build links: this file needs no LibTorch headers) in @dir: policy.pt (actions =
 * state[0] everywhere, a LibTorch exception when state[0] > 100, NaN when state[0] == 7) and
 * raises.pt (always raises). Returns policy.pt's path; "" when they could not be made. */
std::string
write_scripted_policy (const std::string &dir)
{
  const std::string py = venv_python ();
  if (py.empty ())
    return "";
  const std::string cmd = py + " " + source_root () + "/tests/scripted_policies.py " + dir;
  if (std::system (cmd.c_str ()) != 0)
    return "";
  return dir + "/policy.pt";
}

/* A random pi0-tiny checkpoint in @dir, written by `pi0-model init` with the tiny tokenizer. */
testing::AssertionResult
make_tiny_checkpoint (const std::string &dir, int seed)
{
  const char *build = g_getenv ("PI0_BUILD_ROOT");
  if (!build)
    return testing::AssertionFailure () << "PI0_BUILD_ROOT is not set";
  std::string cmd = std::string (build) +
                    "/tools/pi0-model/pi0-model init --config pi0-tiny --seed " +
                    std::to_string (seed) + " --out " + dir + " --tokenizer " + tiny_tokenizer () +
                    " > /dev/null";
  if (std::system (cmd.c_str ()) != 0)
    return testing::AssertionFailure () << cmd << " failed";
  return testing::AssertionSuccess ();
}

GstBuffer *
with_state (GstBuffer *obs, float first)
{
  GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (obs);
  gfloat s[7] = {first, 0, 0, 0, 0, 0, 0};
  gst_pi0_observation_meta_set_state (om, s, 7, om->observation_time, GST_PI0_STATE_FLAG_NONE);
  return obs;
}

} // namespace

TEST (Pi0Infer, NoModelIsAnErrorThatSaysWhatToSet)
{
  GstElement *e = gst_element_factory_make ("pi0infer", nullptr);
  MessagePtr m = start_error (e);
  ASSERT_NE (m, nullptr);
  std::string t = message_text (m.get ());
  EXPECT_NE (t.find ("set model="), std::string::npos) << t;
  EXPECT_NE (t.find ("builtin:pi0-tiny"), std::string::npos) << t;
}

TEST (Pi0Infer, MissingOrCorruptModelNamesTheFile)
{
  TempDir dir;
  {
    MessagePtr m = start_error (make_infer (dir.path () + "/nothing-here"));
    ASSERT_NE (m, nullptr);
    GError *err = nullptr;
    gst_message_parse_error (m.get (), &err, nullptr);
    EXPECT_TRUE (g_error_matches (err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND));
    g_clear_error (&err);
    EXPECT_NE (message_text (m.get ()).find ("nothing-here"), std::string::npos);
  }
  {
    /* A checkpoint directory whose weights are garbage. */
    std::string ck = dir.path () + "/ck";
    g_mkdir (ck.c_str (), 0755);
    g_file_set_contents ((ck + "/config.json").c_str (), "{\"type\": \"pi0\"}", -1, nullptr);
    g_file_set_contents ((ck + "/model.safetensors").c_str (), "not a safetensors file", -1,
                         nullptr);
    MessagePtr m = start_error (make_infer (ck));
    ASSERT_NE (m, nullptr);
    std::string t = message_text (m.get ());
    EXPECT_NE (t.find ("model.safetensors"), std::string::npos) << t;
  }
  {
    MessagePtr m = start_error (make_infer ("builtin:pi0-huge"));
    ASSERT_NE (m, nullptr);
    EXPECT_NE (message_text (m.get ()).find ("the builtins are builtin:pi0-tiny, builtin:pi0, "
                                             "builtin:pi05-tiny and builtin:pi05"),
               std::string::npos)
        << message_text (m.get ());
  }
  {
    MessagePtr m =
        start_error (make_infer ("builtin:pi0-tiny", "tokenizer", "/no/such.model", nullptr));
    ASSERT_NE (m, nullptr);
    EXPECT_NE (message_text (m.get ()).find ("/no/such.model"), std::string::npos);
  }
  {
    MessagePtr m =
        start_error (make_infer ("builtin:pi0-tiny", "norm-stats", "/no/stats.json", nullptr));
    ASSERT_NE (m, nullptr);
    EXPECT_NE (message_text (m.get ()).find ("/no/stats.json"), std::string::npos);
  }
  {
    MessagePtr m = start_error (make_infer ("builtin:pi0-tiny", "action-dims", 33, nullptr));
    ASSERT_NE (m, nullptr);
    EXPECT_NE (message_text (m.get ()).find ("action-dims=33"), std::string::npos);
  }
}

TEST (Pi0Infer, BuiltinTinyAttachesActionsWithObservationTiming)
{
  Infer inf (make_infer ("builtin:pi0-tiny", "action-dims", 7, "instruction", "pick up the cube",
                         nullptr));
  GstPi0ActionMeta am;
  std::vector<float> a = inf.run (make_observation (5, 1), &am);
  ASSERT_EQ (a.size (), 50u * 7u);
  EXPECT_EQ (am.horizon, 50u);
  EXPECT_EQ (am.dim, 7u);
  EXPECT_EQ (am.sequence, 5u);
  EXPECT_EQ (am.observation_time, 5 * 33 * GST_MSECOND);
  EXPECT_GT (am.inference_time, 0u);
  /* The model's own pass, inside the whole inference (tokenizer, norm stats, unnormalizing). */
  ASSERT_NE (am.model_time, GST_CLOCK_TIME_NONE);
  EXPECT_GT (am.model_time, 0u);
  EXPECT_LE (am.model_time, am.inference_time);
  EXPECT_TRUE (am.flags & GST_PI0_ACTION_FLAG_UNTRAINED);
  EXPECT_FALSE (am.flags & GST_PI0_ACTION_FLAG_NON_FINITE);
  for (float x : a)
    ASSERT_TRUE (std::isfinite (x));
  gchar *id = nullptr;
  g_object_get (inf.element.get (), "model-id", &id, nullptr);
  EXPECT_NE (std::string (id ? id : "").find ("untrained"), std::string::npos);
  g_free (id);

  GstStructure *s = nullptr;
  g_object_get (inf.element.get (), "stats", &s, nullptr);
  guint64 chunks = 0;
  gst_structure_get_uint64 (s, "chunks", &chunks);
  EXPECT_EQ (chunks, 1u);
  gst_structure_free (s);
}

TEST (Pi0Infer, SameSeedSameActionsOtherSeedOthers)
{
  auto run = [] (guint64 seed) {
    Infer inf (make_infer ("builtin:pi0-tiny", "seed", seed, nullptr));
    return inf.run (make_observation (3, 9));
  };
  std::vector<float> a = run (11), b = run (11), c = run (12);
  ASSERT_FALSE (a.empty ());
  EXPECT_EQ (a, b); /* bitwise */
  EXPECT_NE (a, c);
}

TEST (Pi0Infer, InstructionByPropertyAndByEventAtTheRightObservation)
{
  auto reference = [] (const char *instruction, guint64 seq) {
    Infer inf (make_infer ("builtin:pi0-tiny", "instruction", instruction, nullptr));
    return inf.run (make_observation (seq, 4));
  };
  std::vector<float> x1 = reference ("open the drawer", 1), y2 = reference ("close the drawer", 2),
                     z3 = reference ("wave", 3), x2 = reference ("open the drawer", 2);
  ASSERT_NE (x2, y2); /* the instruction matters to the model */

  Infer inf (make_infer ("builtin:pi0-tiny", "instruction", "open the drawer", nullptr));
  EXPECT_EQ (inf.run (make_observation (1, 4)), x1);
  /* In the stream, between observations 1 and 2. */
  ASSERT_TRUE (
      gst_harness_push_event (inf.h.get (), gst_pi0_instruction_event_new ("close the drawer")));
  EXPECT_EQ (inf.run (make_observation (2, 4)), y2);
  gchar *now = nullptr;
  g_object_get (inf.element.get (), "instruction", &now, nullptr);
  EXPECT_STREQ (now, "close the drawer");
  g_free (now);
  /* And by property while playing. */
  g_object_set (inf.element.get (), "instruction", "wave", nullptr);
  EXPECT_EQ (inf.run (make_observation (3, 4)), z3);
}

TEST (Pi0Infer, MaskedViewContentDoesNotChangeActions)
{
  Infer inf (make_infer ("builtin:pi0-tiny", nullptr));
  std::vector<float> a = inf.run (make_observation (1, 2, 3, TINY, 2, -1.f));
  std::vector<float> b = inf.run (make_observation (1, 2, 3, TINY, 2, 0.7f));
  ASSERT_FALSE (a.empty ());
  EXPECT_EQ (a, b);
  /* Unmasked, the same content change does matter. */
  std::vector<float> c = inf.run (make_observation (1, 2));
  std::vector<float> d = inf.run (make_observation (1, 3));
  EXPECT_NE (c, d);
}

TEST (Pi0Infer, FewerViewsThanSlotsAreMaskedSlots)
{
  Infer inf (make_infer ("builtin:pi0-tiny", nullptr), 2);
  std::vector<float> a = inf.run (make_observation (1, 2, 2));
  EXPECT_EQ (a.size (), 50u * 32u);
}

TEST (Pi0Infer, MissingOrStaleStateGivesNoActions)
{
  Infer inf (make_infer ("builtin:pi0-tiny", nullptr));
  EXPECT_TRUE (inf.run (make_observation (1, 2, 3, TINY, -1, 0, true)).empty ());
  EXPECT_TRUE (inf.run (make_observation (2, 2, 3, TINY, -1, 0, false, true)).empty ());
  auto warnings = pop_message (inf.bus.get (), GST_MESSAGE_WARNING);
  ASSERT_NE (warnings, nullptr);
  EXPECT_NE (message_text (warnings.get ()).find ("no actions"), std::string::npos);
  EXPECT_FALSE (inf.run (make_observation (3, 2)).empty ());
  GstStructure *s = nullptr;
  g_object_get (inf.element.get (), "stats", &s, nullptr);
  guint64 skipped = 0;
  gst_structure_get_uint64 (s, "skipped-no-state", &skipped);
  EXPECT_EQ (skipped, 2u);
  gst_structure_free (s);

  g_object_set (inf.element.get (), "require-state", FALSE, nullptr);
  EXPECT_FALSE (inf.run (make_observation (4, 2, 3, TINY, -1, 0, true)).empty ());
}

/* pi0.5 reads the state through its prompt (OpenPolicy.Pi05PutsTheStateIntoThePromptAsBins
 * holds the bins): an observation without a state gets no actions (one warning) even with
 * require-state=false, instead of a made-up state in its prompt. */
TEST (Pi0Infer, Pi05TinyRunsAndNeverMakesUpAState)
{
  Infer inf (make_infer ("builtin:pi05-tiny", "action-dims", 7, "require-state", FALSE,
                         "instruction", "pick up the cube", nullptr));
  GstPi0ActionMeta am;
  std::vector<float> a = inf.run (make_observation (1, 2), &am);
  ASSERT_EQ (a.size (), 50u * 7u);
  EXPECT_TRUE (am.flags & GST_PI0_ACTION_FLAG_UNTRAINED);
  for (float x : a)
    ASSERT_TRUE (std::isfinite (x));
  EXPECT_TRUE (inf.run (make_observation (2, 2, 3, TINY, -1, 0, true)).empty ());
  auto w = pop_message (inf.bus.get (), GST_MESSAGE_WARNING);
  ASSERT_NE (w, nullptr);
  EXPECT_NE (message_text (w.get ()).find ("reads the state in its prompt"), std::string::npos)
      << message_text (w.get ());
  gchar *id = nullptr;
  g_object_get (inf.element.get (), "model-id", &id, nullptr);
  EXPECT_NE (std::string (id ? id : "").find ("builtin:pi05-tiny"), std::string::npos);
  g_free (id);
}

TEST (Pi0Infer, ObservationWithoutTensorIsAStreamFormatError)
{
  Infer inf (make_infer ("builtin:pi0-tiny", nullptr));
  GstBuffer *buf = gst_buffer_new ();
  gst_buffer_add_pi0_observation_meta (buf);
  GstFlowReturn r = gst_harness_push (inf.h.get (), buf);
  EXPECT_EQ (r, GST_FLOW_ERROR);
  MessagePtr m = pop_message (inf.bus.get (), GST_MESSAGE_ERROR);
  ASSERT_NE (m, nullptr);
  GError *err = nullptr;
  gst_message_parse_error (m.get (), &err, nullptr);
  EXPECT_TRUE (g_error_matches (err, GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT));
  g_clear_error (&err);
  EXPECT_NE (message_text (m.get ()).find ("cudaprep"), std::string::npos);
  EXPECT_EQ (gst_harness_try_pull (inf.h.get ()), nullptr);
}

TEST (Pi0Infer, WrongImageSizeOrViewCountIsNotNegotiated)
{
  {
    Infer inf (make_infer ("builtin:pi0-tiny", nullptr));
    GstFlowReturn r;
    inf.run (make_observation (1, 2, 3, 64), nullptr, &r);
    EXPECT_EQ (r, GST_FLOW_NOT_NEGOTIATED);
    MessagePtr m = pop_message (inf.bus.get (), GST_MESSAGE_ERROR);
    ASSERT_NE (m, nullptr);
    EXPECT_NE (message_text (m.get ()).find ("set cudaprep width=32 height=32"), std::string::npos);
  }
  {
    /* Five views into a three-slot model: refused at caps time. */
    GstElement *e = make_infer ("builtin:pi0-tiny", nullptr);
    gst_object_ref_sink (e);
    ObjectPtr<GstElement> el (e);
    ObjectPtr<GstBus> bus (gst_bus_new ());
    gst_element_set_bus (e, bus.get ());
    HarnessPtr h (gst_harness_new_with_element (e, "sink", "src"));
    ASSERT_TRUE (gst_harness_push_event (h.get (), gst_event_new_stream_start ("x")));
    CapsPtr caps (gst_caps_from_string (GST_PI0_OBSERVATION_MEDIA_TYPE ",views=(int)5"));
    gst_harness_push_event (h.get (), gst_event_new_caps (caps.get ()));
    GstSegment seg;
    gst_segment_init (&seg, GST_FORMAT_TIME);
    gst_harness_push_event (h.get (), gst_event_new_segment (&seg));
    EXPECT_EQ (gst_harness_push (h.get (), make_observation (1, 2, 5)), GST_FLOW_NOT_NEGOTIATED);
    MessagePtr m = pop_message (bus.get (), GST_MESSAGE_ERROR);
    ASSERT_NE (m, nullptr);
    EXPECT_NE (message_text (m.get ()).find ("5 views but the model takes at most 3"),
               std::string::npos);
    h.reset ();
    gst_element_set_bus (e, nullptr);
  }
}

TEST (Pi0Infer, TorchScriptExceptionIsAnElementErrorAndNaNIsFlagged)
{
  TempDir dir;
  std::string pt = write_scripted_policy (dir.path ());
  ASSERT_NE (pt, "") << "tests/scripted_policies.py failed";
  Infer inf (make_infer (pt, "tokenizer", tiny_tokenizer ().c_str (), nullptr));
  std::vector<float> a = inf.run (with_state (make_observation (1, 2), 0.25f));
  ASSERT_EQ (a.size (), 10u * 8u);
  EXPECT_FLOAT_EQ (a[17], 0.25f);

  GstPi0ActionMeta am;
  std::vector<float> nan = inf.run (with_state (make_observation (2, 2), 7.f), &am);
  ASSERT_EQ (nan.size (), 80u);
  EXPECT_TRUE (std::isnan (nan[0]));
  EXPECT_TRUE (am.flags & GST_PI0_ACTION_FLAG_NON_FINITE);
  GstStructure *s = nullptr;
  g_object_get (inf.element.get (), "stats", &s, nullptr);
  guint64 nf = 0;
  gst_structure_get_uint64 (s, "non-finite", &nf);
  EXPECT_EQ (nf, 1u);
  gst_structure_free (s);

  GstFlowReturn r;
  inf.run (with_state (make_observation (3, 2), 1000.f), nullptr, &r);
  EXPECT_EQ (r, GST_FLOW_ERROR);
  MessagePtr m = pop_message (inf.bus.get (), GST_MESSAGE_ERROR);
  ASSERT_NE (m, nullptr);
  std::string t = message_text (m.get ());
  EXPECT_NE (t.find ("Inference failed on observation 3"), std::string::npos) << t;
  EXPECT_NE (t.find ("view"), std::string::npos) << t;
}

/* A served request whose inference fails fails alone (issue 23): the observation passes on
 * without actions, its request meta says why, a warning instead of an error, and the next
 * request is served. The same failure without a request meta still stops the stream (the test
 * above). */
TEST (Pi0Infer, AServedRequestThatFailsFailsAloneAndTheNextIsServed)
{
  TempDir dir;
  std::string pt = write_scripted_policy (dir.path ());
  ASSERT_NE (pt, "") << "tests/scripted_policies.py failed";
  Infer inf (make_infer (pt, "tokenizer", tiny_tokenizer ().c_str (), nullptr));
  auto request = [] (guint64 n, float state0) {
    GstBuffer *b = with_state (make_observation (n, 2), state0);
    gst_buffer_add_pi0_request_meta (b, "test", 1, n, "p", 0);
    return b;
  };
  ASSERT_EQ (gst_harness_push (inf.h.get (), request (1, 1000.f)), GST_FLOW_OK)
      << "the stream goes on";
  BufferPtr failed (gst_harness_pull (inf.h.get ()));
  ASSERT_NE (failed, nullptr);
  EXPECT_EQ (gst_buffer_get_pi0_action_meta (failed.get ()), nullptr);
  GstPi0RequestMeta *rm = gst_buffer_get_pi0_request_meta (failed.get ());
  ASSERT_NE (rm, nullptr);
  ASSERT_NE (rm->error, nullptr);
  EXPECT_NE (std::string (rm->error).find ("Inference failed on observation 1"), std::string::npos)
      << rm->error;
  MessagePtr w =
      pop_message (inf.bus.get (), (GstMessageType)(GST_MESSAGE_WARNING | GST_MESSAGE_ERROR));
  ASSERT_NE (w, nullptr);
  EXPECT_EQ (GST_MESSAGE_TYPE (w.get ()), GST_MESSAGE_WARNING) << "no error on the bus";
  EXPECT_NE (message_text (w.get ()).find ("Inference failed"), std::string::npos);

  GstFlowReturn r;
  std::vector<float> a = inf.run (request (2, 0.25f), nullptr, &r);
  EXPECT_EQ (r, GST_FLOW_OK);
  ASSERT_EQ (a.size (), 80u) << "the next request is served";
  EXPECT_FLOAT_EQ (a[0], 0.25f);
  GstStructure *st = nullptr;
  g_object_get (inf.element.get (), "stats", &st, nullptr);
  guint64 failed_requests = 0;
  gst_structure_get_uint64 (st, "failed-requests", &failed_requests);
  gst_structure_free (st);
  EXPECT_EQ (failed_requests, 1u);
}

namespace
{

/* ---- Batching (max-batch-size > 1) ---- */

/* Pushes @items (buffers, and events where a buffer is null) and returns the buffers that came
 * out, in order, once @n_out are there. */
struct Item {
  GstBuffer *buf;
  GstEvent *event;
};

std::vector<BufferPtr>
push_all (Infer &inf, const std::vector<Item> &items, size_t n_out)
{
  for (const Item &it : items) {
    if (it.buf)
      EXPECT_EQ (gst_harness_push (inf.h.get (), it.buf), GST_FLOW_OK);
    else
      EXPECT_TRUE (gst_harness_push_event (inf.h.get (), it.event));
  }
  std::vector<BufferPtr> out;
  for (size_t i = 0; i < n_out; i++)
    out.emplace_back (gst_harness_pull (inf.h.get ()));
  return out;
}

std::vector<float>
actions_of (GstBuffer *b)
{
  GstPi0ActionMeta *am = b ? gst_buffer_get_pi0_action_meta (b) : nullptr;
  return am ? std::vector<float> (am->actions, am->actions + (size_t)am->horizon * am->dim)
            : std::vector<float> ();
}

/* max |a - b| over max(1, max |b|): the stacked pass sums in another order than batch 1. */
double
rel_diff (const std::vector<float> &a, const std::vector<float> &b)
{
  double d = 0, m = 1;
  for (size_t i = 0; i < a.size () && i < b.size (); i++) {
    d = std::max (d, (double)std::fabs (a[i] - b[i]));
    m = std::max (m, (double)std::fabs (b[i]));
  }
  return d / m;
}

/* The observations of the batching tests: different images, states, prompts and seeds (the
 * requests of five clients), one without state (passes on without actions), and an instruction
 * event in the middle that must keep its place (a request's own prompt is not changed by it).
 * @later_prompt: the prompt of the requests after the event. */
std::vector<Item>
batch_items (const char *later_prompt = "open the drawer")
{
  std::vector<Item> items;
  auto obs = [] (guint64 seq, float state0, const char *prompt, bool no_state = false) {
    GstBuffer *b = make_observation (seq, 100 + seq, 3, TINY, -1, 0.f, no_state);
    if (!no_state)
      with_state (b, state0);
    gst_buffer_add_pi0_request_meta (b, "test", seq * 10, seq, prompt, 1000 + seq);
    return Item{b, nullptr};
  };
  items.push_back (obs (1, 0.1f, "pick up the cube"));
  items.push_back (obs (2, -0.4f, "pick up the cube"));
  items.push_back (Item{nullptr, gst_pi0_instruction_event_new ("stack the blocks")});
  items.push_back (obs (3, 0.f, later_prompt, true));
  items.push_back (obs (4, 0.7f, later_prompt));
  items.push_back (obs (5, -0.9f, later_prompt));
  return items;
}

} // namespace

TEST (Pi0InferBatch, PropertiesAndDefaults)
{
  ObjectPtr<GstElement> e (make_infer ("builtin:pi0-tiny"));
  gst_object_ref_sink (e.get ());
  guint size = 0;
  guint64 wait = 0;
  g_object_get (e.get (), "max-batch-size", &size, "max-batch-wait", &wait, nullptr);
  EXPECT_EQ (size, 1u);
  EXPECT_EQ (wait, 5 * GST_MSECOND);
}

/* Issue 25: max-batch-wait = G_MAXINT64 (a natural "wait forever") made PLAYING->NULL never
 * return while an observation was held; 2^64-1 (gst-launch's -1) silently disabled batching.
 * The range ends at one hour, and at that wait, on the real system clock, an element holding
 * an observation stops at once. */
TEST (Pi0InferBatch, TheWaitIsBoundedAndAHeldObservationDoesNotBlockStopping)
{
  ObjectPtr<GstElement> e (make_infer ("builtin:pi0-tiny"));
  gst_object_ref_sink (e.get ());
  GParamSpecUInt64 *p = G_PARAM_SPEC_UINT64 (
      g_object_class_find_property (G_OBJECT_GET_CLASS (e.get ()), "max-batch-wait"));
  ASSERT_NE (p, nullptr);
  EXPECT_EQ (p->maximum, 3600 * GST_SECOND);
  for (guint64 v : {(guint64)G_MAXINT64, G_MAXUINT64}) {
    GValue gv = G_VALUE_INIT;
    g_value_init (&gv, G_TYPE_UINT64);
    g_value_set_uint64 (&gv, v);
    EXPECT_TRUE (g_param_value_validate (G_PARAM_SPEC (p), &gv)) << v << " is refused";
    g_value_unset (&gv);
  }

  Infer two (make_infer ("builtin:pi0-tiny", "max-batch-size", 2u, "max-batch-wait",
                         (guint64)3600 * GST_SECOND, nullptr));
  gst_harness_use_systemclock (two.h.get ());
  ASSERT_EQ (gst_harness_push (two.h.get (), with_state (make_observation (1, 7), 0.1f)),
             GST_FLOW_OK);
  EXPECT_EQ (gst_harness_buffers_in_queue (two.h.get ()), 0u) << "held for the batch";
  /* Stopping must return (the test's timeout is the failure otherwise). */
  EXPECT_EQ (gst_element_set_state (two.element.get (), GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
}

/* max-batch-size=4: the four observations that need the policy run in one pass when the 4th
 * comes (nothing leaves before: the wait is an hour on the harness's test clock), and each
 * buffer leaves in input order with its own metas and the chunk it gets with max-batch-size=1. */
TEST (Pi0InferBatch, ChunksEqualThoseOfBatchSizeOneInInputOrderWithTheirMetas)
{
  Infer one (make_infer ("builtin:pi0-tiny", "action-dims", 7, "instruction", "pick up the cube",
                         nullptr));
  std::vector<BufferPtr> ref = push_all (one, batch_items (), 5);

  Infer four (make_infer ("builtin:pi0-tiny", "action-dims", 7, "instruction", "pick up the cube",
                          "max-batch-size", 4u, "max-batch-wait", (guint64)3600 * GST_SECOND,
                          nullptr));
  std::vector<Item> items = batch_items ();
  for (size_t i = 0; i + 1 < items.size (); i++) {
    if (items[i].buf)
      ASSERT_EQ (gst_harness_push (four.h.get (), items[i].buf), GST_FLOW_OK);
    else
      ASSERT_TRUE (gst_harness_push_event (four.h.get (), items[i].event));
  }
  EXPECT_EQ (gst_harness_buffers_in_queue (four.h.get ()), 0u) << "held for the batch";
  std::vector<BufferPtr> got = push_all (four, {items.back ()}, 5);

  GstStructure *st = nullptr;
  g_object_get (four.element.get (), "stats", &st, nullptr);
  guint64 chunks = 0, passes = 0;
  gst_structure_get_uint64 (st, "chunks", &chunks);
  gst_structure_get_uint64 (st, "forward-passes", &passes);
  gst_structure_free (st);
  EXPECT_EQ (chunks, 4u);
  EXPECT_EQ (passes, 1u) << "one forward pass for the four";
  for (size_t i = 0; i < 5; i++) {
    ASSERT_NE (got[i], nullptr);
    GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (got[i].get ());
    ASSERT_NE (om, nullptr);
    EXPECT_EQ (om->sequence, i + 1) << "input order";
    GstPi0RequestMeta *rm = gst_buffer_get_pi0_request_meta (got[i].get ());
    ASSERT_NE (rm, nullptr);
    EXPECT_EQ (rm->client_id, (i + 1) * 10);
    std::vector<float> a = actions_of (got[i].get ()), b = actions_of (ref[i].get ());
    ASSERT_EQ (a.size (), b.size ()) << i;
    if (i == 2) {
      EXPECT_TRUE (a.empty ()) << "no state, no actions";
      continue;
    }
    ASSERT_EQ (a.size (), 50u * 7u);
    EXPECT_LE (rel_diff (a, b), 1e-5) << i;
    GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (got[i].get ());
    EXPECT_EQ (am->sequence, i + 1);
  }
  /* Not vacuous: the later requests' own prompt changed their chunks, as with size 1. */
  Infer other (make_infer ("builtin:pi0-tiny", "action-dims", 7, "instruction", "pick up the cube",
                           nullptr));
  std::vector<BufferPtr> o = push_all (other, batch_items ("pick up the cube"), 5);
  EXPECT_GT (rel_diff (actions_of (o[3].get ()), actions_of (got[3].get ())), 1e-3);
}

/* A server's requests bring their client's prompt and seed in the request meta, and pi0infer uses
 * them per request, in one batch too: two clients with the same observation but different seeds
 * and prompts each get the chunk that observation gets on the camera path with that prompt and
 * seed (instruction and seed properties, sequence 0), and nothing rewrites the instruction. */
TEST (Pi0InferBatch, EachRequestKeepsItsClientsPromptAndSeedInOneBatch)
{
  struct Client {
    const char *prompt;
    guint64 seed;
  } clients[2] = {{"pick up the red cube", 11}, {"open the top drawer", 22}};
  auto request = [] (guint64 client, const Client &c) {
    GstBuffer *b = with_state (make_observation (0, 7), 0.3f);
    gst_buffer_add_pi0_request_meta (b, "test", client, 0, c.prompt, c.seed);
    return Item{b, nullptr};
  };

  Infer two (make_infer ("builtin:pi0-tiny", "action-dims", 7, "instruction", "unused",
                         "max-batch-size", 2u, "max-batch-wait", (guint64)3600 * GST_SECOND,
                         nullptr));
  std::vector<BufferPtr> got =
      push_all (two, {request (1, clients[0]), request (2, clients[1])}, 2);
  GstStructure *st = nullptr;
  g_object_get (two.element.get (), "stats", &st, nullptr);
  guint64 passes = 0;
  gst_structure_get_uint64 (st, "forward-passes", &passes);
  gst_structure_free (st);
  EXPECT_EQ (passes, 1u) << "both in one pass";
  gchar *instruction = nullptr;
  g_object_get (two.element.get (), "instruction", &instruction, nullptr);
  EXPECT_STREQ (instruction, "unused") << "no property rewrite";
  g_free (instruction);

  for (int i = 0; i < 2; i++) {
    Infer alone (make_infer ("builtin:pi0-tiny", "action-dims", 7, "instruction", clients[i].prompt,
                             "seed", clients[i].seed, nullptr));
    std::vector<float> ref = alone.run (with_state (make_observation (0, 7), 0.3f));
    std::vector<float> a = actions_of (got[i].get ());
    ASSERT_EQ (a.size (), 50u * 7u) << i;
    EXPECT_LE (rel_diff (a, ref), 1e-5) << "client " << i << " gets its own prompt and seed";
  }
  EXPECT_GT (rel_diff (actions_of (got[0].get ()), actions_of (got[1].get ())), 1e-3)
      << "the two clients' chunks differ";
}

/* A NaN observation in a batch: its chunk is what max-batch-size=1 gives it (non-finite,
 * flagged), the others come out finite and as they are alone. */
TEST (Pi0InferBatch, ANaNObservationDoesNotPoisonTheOthers)
{
  auto items = [] () {
    std::vector<Item> v;
    for (guint64 seq = 1; seq <= 4; seq++) {
      GstBuffer *b = with_state (make_observation (seq, 200 + seq), 0.1f * seq);
      if (seq == 2) {
        GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (b);
        ((float *)tm->data)[5] = NAN;
      }
      v.push_back (Item{b, nullptr});
    }
    return v;
  };
  Infer one (make_infer ("builtin:pi0-tiny", nullptr));
  std::vector<BufferPtr> ref = push_all (one, items (), 4);
  Infer four (make_infer ("builtin:pi0-tiny", "max-batch-size", 4u, "max-batch-wait",
                          (guint64)3600 * GST_SECOND, nullptr));
  std::vector<BufferPtr> got = push_all (four, items (), 4);
  for (size_t i = 0; i < 4; i++) {
    ASSERT_NE (got[i], nullptr);
    GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (got[i].get ()),
                     *ram = gst_buffer_get_pi0_action_meta (ref[i].get ());
    ASSERT_NE (am, nullptr);
    ASSERT_NE (ram, nullptr);
    EXPECT_EQ (am->flags & GST_PI0_ACTION_FLAG_NON_FINITE,
               ram->flags & GST_PI0_ACTION_FLAG_NON_FINITE)
        << i;
    std::vector<float> a = actions_of (got[i].get ());
    bool finite = std::all_of (a.begin (), a.end (), [] (float x) { return std::isfinite (x); });
    if (i == 1) {
      EXPECT_FALSE (finite);
      EXPECT_TRUE (am->flags & GST_PI0_ACTION_FLAG_NON_FINITE);
    } else {
      EXPECT_TRUE (finite) << i;
      EXPECT_LE (rel_diff (a, actions_of (ref[i].get ())), 1e-5) << i;
    }
  }
}

/* EOS with a partial batch runs it: the held buffers leave with their chunks before the EOS. */

/* A batch with one request whose inference fails (a policy that raises): the stacked pass fails,
 * each runs alone, and only that request fails; the three others get their chunks, in order, and
 * the element keeps going. */
TEST (Pi0InferBatch, OneFailingRequestFailsOnlyItself)
{
  TempDir dir;
  std::string pt = write_scripted_policy (dir.path ());
  ASSERT_NE (pt, "") << "tests/scripted_policies.py failed";
  Infer four (make_infer (pt, "tokenizer", tiny_tokenizer ().c_str (), "max-batch-size", 4u,
                          "max-batch-wait", (guint64)3600 * GST_SECOND, nullptr));
  std::vector<Item> items;
  for (guint64 seq = 1; seq <= 4; seq++) {
    GstBuffer *b = with_state (make_observation (seq, 300 + seq), seq == 3 ? 1000.f : 0.5f * seq);
    gst_buffer_add_pi0_request_meta (b, "test", seq, 0, "p", seq);
    items.push_back (Item{b, nullptr});
  }
  std::vector<BufferPtr> got = push_all (four, items, 4);
  for (size_t i = 0; i < 4; i++) {
    ASSERT_NE (got[i], nullptr) << i;
    EXPECT_EQ (gst_buffer_get_pi0_observation_meta (got[i].get ())->sequence, i + 1) << "in order";
    GstPi0RequestMeta *rm = gst_buffer_get_pi0_request_meta (got[i].get ());
    std::vector<float> a = actions_of (got[i].get ());
    if (i == 2) {
      EXPECT_TRUE (a.empty ());
      EXPECT_NE (rm->error, nullptr);
    } else {
      ASSERT_EQ (a.size (), 80u) << i;
      EXPECT_FLOAT_EQ (a[0], 0.5f * (i + 1));
      EXPECT_EQ (rm->error, nullptr);
    }
  }
  EXPECT_EQ (pop_message (four.bus.get (), GST_MESSAGE_ERROR), nullptr);
}

TEST (Pi0InferBatch, EosRunsAPartialBatchBeforeItself)
{
  Infer four (make_infer ("builtin:pi0-tiny", "max-batch-size", 4u, "max-batch-wait",
                          (guint64)3600 * GST_SECOND, nullptr));
  ASSERT_EQ (gst_harness_push (four.h.get (), with_state (make_observation (1, 1), 0.2f)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (four.h.get (), with_state (make_observation (2, 2), 0.3f)),
             GST_FLOW_OK);
  EXPECT_EQ (gst_harness_buffers_in_queue (four.h.get ()), 0u);
  ASSERT_TRUE (gst_harness_push_event (four.h.get (), gst_event_new_eos ()));
  ASSERT_EQ (gst_harness_buffers_in_queue (four.h.get ()), 2u);
  for (guint64 seq = 1; seq <= 2; seq++) {
    BufferPtr b (gst_harness_pull (four.h.get ()));
    GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (b.get ());
    ASSERT_NE (am, nullptr);
    EXPECT_EQ (am->sequence, seq);
  }
  bool eos = false;
  while (GstEvent *e = gst_harness_try_pull_event (four.h.get ())) {
    eos = eos || GST_EVENT_TYPE (e) == GST_EVENT_EOS;
    gst_event_unref (e);
  }
  EXPECT_TRUE (eos);
}

/* A partial batch runs when max-batch-wait has passed on the pipeline clock (the harness's test
 * clock, advanced by hand: no sleeping, no timing). */
TEST (Pi0InferBatch, APartialBatchRunsWhenTheWaitEndsOnTheClock)
{
  Infer four (make_infer ("builtin:pi0-tiny", "max-batch-size", 4u, "max-batch-wait",
                          (guint64)20 * GST_MSECOND, nullptr));
  gst_harness_use_testclock (four.h.get ());
  ASSERT_EQ (gst_harness_push (four.h.get (), with_state (make_observation (7, 1), 0.2f)),
             GST_FLOW_OK);
  EXPECT_EQ (gst_harness_buffers_in_queue (four.h.get ()), 0u);
  ASSERT_TRUE (gst_harness_crank_single_clock_wait (four.h.get ()));
  BufferPtr b (gst_harness_pull (four.h.get ())); /* waits for the wait thread's push */
  ASSERT_NE (b, nullptr);
  GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (b.get ());
  ASSERT_NE (am, nullptr);
  EXPECT_EQ (am->sequence, 7u);
}

namespace
{

} // namespace

TEST (Pi0Infer, CheckpointWrittenByPi0ModelInit)
{
  TempDir dir;
  std::string ck = dir.path () + "/tiny";
  ASSERT_TRUE (make_tiny_checkpoint (ck, 3));

  std::vector<float> a, b;
  {
    Infer inf (make_infer (ck, "action-dims", 14, nullptr));
    a = inf.run (make_observation (1, 2));
    gchar *id = nullptr;
    g_object_get (inf.element.get (), "model-id", &id, nullptr);
    EXPECT_STREQ (id, ck.c_str ());
    g_free (id);
  }
  {
    /* The same weights through the builtin path differ (seed 3 vs the builtin's 0). */
    Infer inf (make_infer ("builtin:pi0-tiny", "action-dims", 14, nullptr));
    b = inf.run (make_observation (1, 2));
  }
  ASSERT_EQ (a.size (), 50u * 14u);
  EXPECT_NE (a, b);

  /* With openpi norm stats, actions come back in robot units: z-score inverted. */
  std::string stats = dir.path () + "/norm_stats.json";
  std::string mean = "[", stdv = "[";
  for (int i = 0; i < 14; i++) {
    mean += std::string (i ? "," : "") + std::to_string (10.0 * i);
    stdv += std::string (i ? "," : "") + "2.0";
  }
  mean += "]";
  stdv += "]";
  std::string json =
      "{\"norm_stats\": {\"state\": {\"mean\": [0,0,0,0,0,0,0], \"std\": [1,1,1,1,1,1,1]}, "
      "\"actions\": {\"mean\": " +
      mean + ", \"std\": " + stdv + "}}}";
  g_file_set_contents (stats.c_str (), json.c_str (), -1, nullptr);
  Infer inf (make_infer (ck, "action-dims", 14, "norm-stats", stats.c_str (), nullptr));
  std::vector<float> c = inf.run (make_observation (1, 2));
  ASSERT_EQ (c.size (), a.size ());
  for (size_t i = 0; i < c.size (); i++)
    EXPECT_NEAR (c[i], a[i] * (2.0 + 1e-6) + 10.0 * (i % 14), 1e-3) << i;
}

TEST (Pi0Infer, AnswersLatencyWithItsInferenceTime)
{
  Infer inf (make_infer ("builtin:pi0-tiny", nullptr));
  for (int i = 0; i < 3; i++)
    ASSERT_FALSE (inf.run (make_observation (i, 2)).empty ());
  GstQuery *q = gst_query_new_latency ();
  GstPad *src = gst_element_get_static_pad (inf.element.get (), "src");
  ASSERT_TRUE (gst_pad_query (src, q));
  gboolean live;
  GstClockTime min, max;
  gst_query_parse_latency (q, &live, &min, &max);
  EXPECT_GT (min, 0u); /* the harness upstream reports 0 */
  gst_query_unref (q);
  gst_object_unref (src);
}

/* pipelines/infer-checkpoint.txt with a checkpoint made by pi0-model init. */
TEST (Pi0Infer, CheckpointPipelineLineRuns)
{
  TempDir dir;
  std::string ck = dir.path () + "/tiny";
  ASSERT_TRUE (make_tiny_checkpoint (ck, 1));

  gchar *text = nullptr;
  ASSERT_TRUE (g_file_get_contents ((source_root () + "/pipelines/infer-checkpoint.txt").c_str (),
                                    &text, nullptr, nullptr));
  std::string line;
  gchar **lines = g_strsplit (text, "\n", -1);
  for (gchar **l = lines; *l; l++) {
    if (**l && **l != '#')
      line += *l;
  }
  g_strfreev (lines);
  g_free (text);
  size_t at = line.find ("/tmp/pi0-tiny");
  ASSERT_NE (at, std::string::npos);
  line.replace (at, strlen ("/tmp/pi0-tiny"), ck);

  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (line, &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  SinkCounts counts;
  watch_sinks (pipe.get (), &counts);
  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  GstBus *bus = gst_element_get_bus (pipe.get ());
  MessagePtr msg (gst_bus_timed_pop_filtered (
      bus, 60 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR)));
  gst_object_unref (bus);
  ASSERT_NE (msg, nullptr);
  ASSERT_EQ (GST_MESSAGE_TYPE (msg.get ()), GST_MESSAGE_EOS) << message_text (msg.get ());
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
  EXPECT_GT (counts.actions.load (), 0);
}

/* Issue 16: a tokenizer that is a directory (given, or named by the checkpoint) aborted the
 * process inside SentencePiece. It is an element error naming it. */
TEST (Pi0Infer, TokenizerThatIsADirectoryIsAnElementErrorNotACrash)
{
  TempDir dir;
  {
    MessagePtr m =
        start_error (make_infer ("builtin:pi0-tiny", "tokenizer", dir.path ().c_str (), nullptr));
    ASSERT_NE (m, nullptr);
    GError *err = nullptr;
    gst_message_parse_error (m.get (), &err, nullptr);
    EXPECT_TRUE (g_error_matches (err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ));
    g_clear_error (&err);
    std::string t = message_text (m.get ());
    EXPECT_NE (t.find (dir.path ()), std::string::npos) << t;
    EXPECT_NE (t.find ("is a directory"), std::string::npos) << t;
  }
  {
    const char *build = g_getenv ("PI0_BUILD_ROOT");
    ASSERT_NE (build, nullptr);
    std::string ck = dir.path () + "/ck";
    std::string cmd = std::string (build) +
                      "/tools/pi0-model/pi0-model init --config pi0-tiny --seed 1 --out " + ck +
                      " --tokenizer tok.model > /dev/null";
    ASSERT_EQ (std::system (cmd.c_str ()), 0) << cmd;
    ASSERT_EQ (g_mkdir ((ck + "/tok.model").c_str (), 0755), 0);
    MessagePtr m = start_error (make_infer (ck));
    ASSERT_NE (m, nullptr);
    std::string t = message_text (m.get ());
    EXPECT_NE (t.find (ck + "/tok.model"), std::string::npos) << t;
    EXPECT_NE (t.find ("is a directory"), std::string::npos) << t;
  }
}

/* Issue 16: norm stats beyond float32 (1e39) made non-finite actions; refused at start. */
TEST (Pi0Infer, NormStatsBeyondFloat32AreRefusedAtStart)
{
  TempDir dir;
  std::string stats = dir.path () + "/norm_stats.json";
  g_file_set_contents (stats.c_str (),
                       "{\"norm_stats\": {\"state\": {\"mean\": [0], \"std\": [1]}, "
                       "\"actions\": {\"mean\": [0, 1e39], \"std\": [1, 1]}}}",
                       -1, nullptr);
  MessagePtr m =
      start_error (make_infer ("builtin:pi0-tiny", "norm-stats", stats.c_str (), nullptr));
  ASSERT_NE (m, nullptr);
  std::string t = message_text (m.get ());
  EXPECT_NE (t.find (stats), std::string::npos) << t;
  EXPECT_NE (t.find ("\"mean\"[1]"), std::string::npos) << t;
}

/* Issue 17: a TorchScript policy that always raises must fail at start(), before the robot
 * gets anything, whenever its input sizes are known without a stream: it declares num_views,
 * image_size and state_dim (not max_tokens: the element's prompt length is used). */
TEST (Pi0Infer, TorchScriptPolicyThatAlwaysRaisesFailsAtStart)
{
  TempDir dir;
  ASSERT_NE (write_scripted_policy (dir.path ()), "");
  std::string path = dir.path () + "/raises.pt";
  MessagePtr m = start_error (make_infer (path, "tokenizer", tiny_tokenizer ().c_str (), nullptr));
  ASSERT_NE (m, nullptr);
  GError *err = nullptr;
  gst_message_parse_error (m.get (), &err, nullptr);
  EXPECT_TRUE (g_error_matches (err, GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT));
  g_clear_error (&err);
  std::string t = message_text (m.get ());
  EXPECT_NE (t.find ("failed its warm-up run"), std::string::npos) << t;
  EXPECT_NE (t.find ("view"), std::string::npos) << t;
}

/* An instruction longer than the model's prompt is cut (as openpi does), and said once. */
TEST (Pi0Infer, InstructionLongerThanThePromptIsCutWithAWarning)
{
  std::string essay;
  for (int i = 0; i < 60; i++)
    essay += "then stack the blocks ";
  Infer inf (make_infer ("builtin:pi0-tiny", "instruction", essay.c_str (), nullptr));
  ASSERT_FALSE (inf.run (make_observation (1, 2)).empty ());
  ASSERT_FALSE (inf.run (make_observation (2, 2)).empty ());
  MessagePtr w = pop_message (inf.bus.get (), GST_MESSAGE_WARNING);
  ASSERT_NE (w, nullptr);
  EXPECT_NE (message_text (w.get ()).find ("it was cut"), std::string::npos)
      << message_text (w.get ());
  EXPECT_EQ (pop_message (inf.bus.get (), GST_MESSAGE_WARNING), nullptr) << "warned once";
}

/* The same as a user met it: gst-launch-1.0 with the built plugin. There the exception that
 * SentencePiece throws for a directory could not be caught and the process aborted (SIGABRT,
 * no message), which the in-process test above does not reproduce. */
TEST (Pi0Infer, TokenizerThatIsADirectoryUnderGstLaunchIsAnErrorNotAnAbort)
{
  gchar *launch = g_find_program_in_path ("gst-launch-1.0");
  if (!launch)
    GTEST_SKIP () << "gst-launch-1.0 is not installed";
  const char *build = g_getenv ("PI0_BUILD_ROOT");
  ASSERT_NE (build, nullptr);
  TempDir dir;
  const std::string tok = "tokenizer=" + dir.path ();
  const char *argv[] = {launch,
                        "pi0viewmux",
                        "name=mux",
                        "!",
                        "cudaprep",
                        "width=32",
                        "height=32",
                        "!",
                        "pi0infer",
                        "model=builtin:pi0-tiny",
                        tok.c_str (),
                        "require-state=false",
                        "!",
                        "fakesink",
                        "videotestsrc",
                        "num-buffers=3",
                        "!",
                        "mux.main",
                        nullptr};
  gchar **env = g_get_environ ();
  for (auto &kv : gst_child_env (dir.path ()))
    env = g_environ_setenv (env, kv.first.c_str (), kv.second.c_str (), TRUE);
  gchar *out = nullptr, *err = nullptr;
  gint status = 0;
  GError *error = nullptr;
  gboolean spawned = g_spawn_sync (nullptr, const_cast<gchar **> (argv), env, G_SPAWN_DEFAULT,
                                   nullptr, nullptr, &out, &err, &status, &error);
  g_strfreev (env);
  g_free (launch);
  ASSERT_TRUE (spawned) << (error ? error->message : "");
  std::string text = std::string (out ? out : "") + (err ? err : "");
  g_free (out);
  g_free (err);
  ASSERT_TRUE (WIFEXITED (status)) << "killed by signal " << WTERMSIG (status) << ":\n" << text;
  EXPECT_NE (WEXITSTATUS (status), 0) << text; /* gst-launch-1.0 exits 255 when it cannot preroll */
  EXPECT_NE (text.find ("is a directory"), std::string::npos) << text;
}

/* ---- Real-time chunking (issue 13): the sink's pi0-executing feedback ----------------------- */

namespace
{

guint64
infer_stat (GstElement *e, const char *field)
{
  GstStructure *s = nullptr;
  g_object_get (e, "stats", &s, nullptr);
  guint64 v = 0;
  EXPECT_TRUE (gst_structure_get_uint64 (s, field, &v)) << field;
  gst_structure_free (s);
  return v;
}

/* Mean |a - b| over rows [r0, r1) of two [H, dim] chunks, b starting at row @shift. */
double
row_distance (const std::vector<float> &a, const std::vector<float> &b, int dim, int r0, int r1,
              int shift)
{
  double sum = 0;
  int n = 0;
  for (int r = r0; r < r1; r++)
    for (int j = 0; j < dim; j++, n++)
      sum += std::fabs ((double)a[(size_t)r * dim + j] - (double)b[(size_t)(r + shift) * dim + j]);
  return sum / n;
}

constexpr GstClockTime kRtcNow = 10 * GST_SECOND;
constexpr guint64 kRtcPeriod = 20 * GST_MSECOND;

/* pi0-tiny with @rtc; the test clock at kRtcNow so that the observations (at 33 ms steps) are
 * in the past. */
struct RtcInfer : Infer {
  explicit RtcInfer (gint rtc)
      : Infer (make_infer ("builtin:pi0-tiny", "rtc", rtc, "seed", (guint64)7, nullptr))
  {
    gst_harness_set_time (h.get (), kRtcNow);
  }
  bool feedback (GstEvent *e) { return gst_harness_push_upstream_event (h.get (), e); }
};

} // namespace

TEST (Pi0InferRtc, PropertiesAndDefaults)
{
  ObjectPtr<GstElement> e (make_infer ("builtin:pi0-tiny"));
  gst_object_ref_sink (e.get ());
  gint rtc = -1;
  guint horizon = 99;
  gdouble beta = 0;
  g_object_get (e.get (), "rtc", &rtc, "rtc-execution-horizon", &horizon, "rtc-max-guidance-weight",
                &beta, nullptr);
  EXPECT_EQ (rtc, 0); /* off */
  EXPECT_EQ (horizon, 0u);
  EXPECT_DOUBLE_EQ (beta, 5.0);
  gst_util_set_object_arg (G_OBJECT (e.get ()), "rtc", "guided");
  g_object_get (e.get (), "rtc", &rtc, nullptr);
  EXPECT_EQ (rtc, 1); /* guided */
}

TEST (Pi0InferRtc, TheEventRoundTripsAndRefusesBadFields)
{
  GstEvent *e = gst_pi0_executing_event_new (4, 3, 120 * GST_MSECOND, kRtcPeriod);
  guint64 chunk = 0, period = 0;
  guint row = 0;
  GstClockTime t = 0;
  EXPECT_EQ (GST_EVENT_TYPE (e), GST_EVENT_CUSTOM_UPSTREAM);
  ASSERT_TRUE (gst_pi0_executing_event_parse (e, &chunk, &row, &t, &period));
  EXPECT_EQ (chunk, 4u);
  EXPECT_EQ (row, 3u);
  EXPECT_EQ (t, 120 * GST_MSECOND);
  EXPECT_EQ (period, kRtcPeriod);
  gst_event_unref (e);
  /* A NaN where a time belongs, a zero period, a missing field: not an executing event. */
  GstEvent *bad[] = {
      gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
                            gst_structure_new (GST_PI0_EXECUTING_EVENT_NAME, "chunk-id",
                                               G_TYPE_UINT64, (guint64)1, "row", G_TYPE_UINT, 0u,
                                               "time", G_TYPE_DOUBLE, (double)NAN, "period",
                                               G_TYPE_UINT64, kRtcPeriod, nullptr)),
      gst_pi0_executing_event_new (1, 0, GST_MSECOND, 0),
      gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
                            gst_structure_new (GST_PI0_EXECUTING_EVENT_NAME, "chunk-id",
                                               G_TYPE_UINT64, (guint64)1, nullptr)),
  };
  for (GstEvent *b : bad) {
    EXPECT_FALSE (gst_pi0_executing_event_parse (b, nullptr, nullptr, nullptr, nullptr));
    gst_event_unref (b);
  }
}

/* The guided chunk's first rows follow what the robot will still execute of the previous
 * chunk much more closely than the unguided chunk from the same noise does. */
TEST (Pi0InferRtc, GuidedChunkContinuesTheExecutingChunk)
{
  RtcInfer off (0), on (1);
  std::vector<float> a_off = off.run (make_observation (1, 11));
  std::vector<float> a_on = on.run (make_observation (1, 11));
  ASSERT_EQ (a_off.size (), 50u * 32);
  EXPECT_EQ (a_off, a_on); /* no feedback yet: plain sampling, bit for bit */
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-guided"), 0u);

  /* The sink started chunk 1 at row 3 (its capture was 3 periods before the takeover). */
  const GstClockTime obs1 = 33 * GST_MSECOND;
  ASSERT_TRUE (on.feedback (gst_pi0_executing_event_new (1, 3, obs1 + 3 * kRtcPeriod, kRtcPeriod)));
  ASSERT_TRUE (
      off.feedback (gst_pi0_executing_event_new (1, 3, obs1 + 3 * kRtcPeriod, kRtcPeriod)));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback"), 1u);

  /* Observation 2 at 66 ms: chunk 1's rows from round(33 / 20) = 2 on run from then. */
  std::vector<float> b_off = off.run (make_observation (2, 22));
  std::vector<float> b_on = on.run (make_observation (2, 22));
  ASSERT_EQ (b_on.size (), 50u * 32);
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-guided"), 1u);
  EXPECT_EQ (infer_stat (off.element.get (), "rtc-guided"), 0u);
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-delay"), 3u);
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-prefix-rows"), 48u);
  for (float v : b_on)
    ASSERT_TRUE (std::isfinite (v));
  const int shift = 2;
  /* The frozen rows (the delay) and the soft region after them. */
  const double frozen_on = row_distance (b_on, a_on, 32, 0, 3, shift);
  const double frozen_off = row_distance (b_off, a_off, 32, 0, 3, shift);
  const double soft_on = row_distance (b_on, a_on, 32, 3, 15, shift);
  const double soft_off = row_distance (b_off, a_off, 32, 3, 15, shift);
  RecordProperty ("frozen_on", std::to_string (frozen_on));
  RecordProperty ("frozen_off", std::to_string (frozen_off));
  EXPECT_LT (frozen_on, 0.5 * frozen_off) << frozen_on << " vs " << frozen_off;
  EXPECT_LT (soft_on, soft_off) << soft_on << " vs " << soft_off;
}

/* Issue 27: a pi0-episode start (the robot was reset) makes the next chunk the unguided one,
 * bit for bit, and a late report about the last episode's chunk guides nothing. An episode
 * stop, or another custom event, forgets nothing. */
TEST (Pi0InferRtc, AnEpisodeStartForgetsTheChunksMadeBefore)
{
  RtcInfer off (0), on (1), kept (1);
  for (RtcInfer *r : {&off, &on, &kept})
    ASSERT_EQ (r->run (make_observation (1, 11)).size (), 50u * 32);
  const GstClockTime obs1 = 33 * GST_MSECOND;
  for (RtcInfer *r : {&on, &kept})
    ASSERT_TRUE (
        r->feedback (gst_pi0_executing_event_new (1, 3, obs1 + 3 * kRtcPeriod, kRtcPeriod)));
  ASSERT_TRUE (gst_harness_push_event (on.h.get (),
                                       gst_pi0_episode_event_new (GST_PI0_EPISODE_START, "next")));
  ASSERT_TRUE (gst_harness_push_event (kept.h.get (),
                                       gst_pi0_episode_event_new (GST_PI0_EPISODE_STOP, nullptr)));
  std::vector<float> b_off = off.run (make_observation (2, 22));
  std::vector<float> b_on = on.run (make_observation (2, 22));
  std::vector<float> b_kept = kept.run (make_observation (2, 22));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-guided"), 0u);
  EXPECT_EQ (b_on, b_off);
  EXPECT_EQ (infer_stat (kept.element.get (), "rtc-guided"), 1u) << "a stop forgets nothing";
  EXPECT_NE (b_kept, b_off);
  /* Chunk 1 is gone: reporting it now is refused. */
  ASSERT_TRUE (on.feedback (gst_pi0_executing_event_new (1, 4, obs1 + 4 * kRtcPeriod, kRtcPeriod)));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback-ignored"), 1u);
}

/* Issue 25: a report about a chunk 16 chunks old (a long round trip) is counted apart from
 * reports that cannot be right. */
TEST (Pi0InferRtc, ALateReportIsCountedAsForgotten)
{
  RtcInfer on (1);
  for (guint64 i = 1; i <= 17; i++)
    ASSERT_EQ (on.run (make_observation (i, i)).size (), 50u * 32) << i;
  const GstClockTime obs1 = 33 * GST_MSECOND;
  ASSERT_TRUE (on.feedback (gst_pi0_executing_event_new (1, 3, obs1 + 3 * kRtcPeriod, kRtcPeriod)));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback-forgotten"), 1u);
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback-ignored"), 1u);
  ASSERT_TRUE (on.feedback (gst_pi0_executing_event_new (2, 3, obs1 + 4 * kRtcPeriod, kRtcPeriod)));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback"), 1u) << "chunk 2 is remembered";
  ASSERT_TRUE (
      on.feedback (gst_pi0_executing_event_new (99, 3, obs1 + 4 * kRtcPeriod, kRtcPeriod)));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback-forgotten"), 1u) << "99 was never made";
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback-ignored"), 2u);
}

/* Issue 25: rtc-execution-horizon=1000 over a 50-row chunk was accepted, then every chunk
 * posted a warning (30 a second). At start it is an error; set while playing, one warning per
 * value and the chunk's length (which guides nothing) is used. */
TEST (Pi0InferRtc, AnExecutionHorizonPastTheChunkIsAnErrorAtStartAndOneWarningWhilePlaying)
{
  MessagePtr m = start_error (
      make_infer ("builtin:pi0-tiny", "rtc", 1, "rtc-execution-horizon", 1000u, nullptr));
  ASSERT_NE (m, nullptr);
  std::string t = message_text (m.get ());
  EXPECT_NE (t.find ("rtc-execution-horizon=1000 is more than the 50 rows of this model's chunk"),
             std::string::npos)
      << t;
  Infer whole (make_infer ("builtin:pi0-tiny", "rtc", 1, "rtc-execution-horizon", 50u, nullptr));
  EXPECT_EQ (whole.run (make_observation (1, 11)).size (), 50u * 32) << "50 (the chunk) is allowed";

  RtcInfer on (1);
  ASSERT_EQ (on.run (make_observation (1, 11)).size (), 50u * 32);
  const GstClockTime obs1 = 33 * GST_MSECOND;
  ASSERT_TRUE (on.feedback (gst_pi0_executing_event_new (1, 3, obs1 + 3 * kRtcPeriod, kRtcPeriod)));
  g_object_set (on.element.get (), "rtc-execution-horizon", 1000u, nullptr);
  for (guint64 i = 2; i <= 6; i++)
    ASSERT_EQ (on.run (make_observation (i, 11 * i)).size (), 50u * 32) << i;
  MessagePtr w = pop_message (on.bus.get (), GST_MESSAGE_WARNING);
  ASSERT_NE (w, nullptr);
  t = message_text (w.get ());
  EXPECT_NE (t.find ("rtc-execution-horizon=1000 is more than the 50 rows of a chunk: using 50"),
             std::string::npos)
      << t;
  EXPECT_EQ (pop_message (on.bus.get (), GST_MESSAGE_WARNING), nullptr) << "once, not per chunk";
  EXPECT_EQ (pop_message (on.bus.get (), GST_MESSAGE_ERROR), nullptr);
}

/* Feedback that cannot be right changes nothing: a warning, a counter, and the next chunk is
 * the unguided one. */
TEST (Pi0InferRtc, BadFeedbackIsIgnoredWithAWarning)
{
  RtcInfer off (0), on (1);
  std::vector<float> a = on.run (make_observation (1, 11));
  off.run (make_observation (1, 11));
  ASSERT_FALSE (a.empty ());
  const GstClockTime obs1 = 33 * GST_MSECOND;
  GstEvent *bad[] = {
      /* a chunk this element never made */
      gst_pi0_executing_event_new (99, 0, obs1, kRtcPeriod),
      /* from the future of the element's clock */
      gst_pi0_executing_event_new (1, 0, kRtcNow + GST_SECOND, kRtcPeriod),
      /* a row beyond the chunk */
      gst_pi0_executing_event_new (1, 50, obs1, kRtcPeriod),
      /* NaN for a time */
      gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
                            gst_structure_new (GST_PI0_EXECUTING_EVENT_NAME, "chunk-id",
                                               G_TYPE_UINT64, (guint64)1, "row", G_TYPE_UINT, 0u,
                                               "time", G_TYPE_DOUBLE, (double)NAN, "period",
                                               G_TYPE_UINT64, kRtcPeriod, nullptr)),
      /* no period */
      gst_pi0_executing_event_new (1, 0, obs1, 0),
  };
  for (GstEvent *e : bad)
    on.feedback (e);
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback-ignored"), 5u);
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-feedback"), 0u);
  MessagePtr w = pop_message (on.bus.get (), GST_MESSAGE_WARNING);
  ASSERT_NE (w, nullptr);
  EXPECT_NE (message_text (w.get ()).find ("Feedback from the sink ignored"), std::string::npos)
      << message_text (w.get ());
  std::vector<float> b_on = on.run (make_observation (2, 22));
  std::vector<float> b_off = off.run (make_observation (2, 22));
  EXPECT_EQ (infer_stat (on.element.get (), "rtc-guided"), 0u);
  EXPECT_EQ (b_on, b_off);
}

/* A TorchScript policy cannot be guided: one warning, chunks as without rtc. */
TEST (Pi0InferRtc, TorchScriptPolicyStaysUnguidedWithAWarning)
{
  TempDir dir;
  std::string pt = write_scripted_policy (dir.path ());
  ASSERT_NE (pt, "") << "tests/scripted_policies.py failed";
  Infer inf (make_infer (pt, "tokenizer", tiny_tokenizer ().c_str (), "rtc", 1, nullptr));
  gst_harness_set_time (inf.h.get (), kRtcNow);
  ASSERT_FALSE (inf.run (make_observation (1, 11)).empty ());
  gst_harness_push_upstream_event (
      inf.h.get (), gst_pi0_executing_event_new (1, 0, 33 * GST_MSECOND, kRtcPeriod));
  ASSERT_FALSE (inf.run (make_observation (2, 22)).empty ());
  EXPECT_EQ (infer_stat (inf.element.get (), "rtc-guided"), 0u);
  bool warned = false;
  while (GstMessage *m = gst_bus_pop_filtered (inf.bus.get (), GST_MESSAGE_WARNING)) {
    warned |= message_text (m).find ("cannot be guided") != std::string::npos;
    gst_message_unref (m);
  }
  EXPECT_TRUE (warned);
}

/* cuda-device-id has one range and one meaning on both CUDA elements: -1 (the default) is auto,
 * device 0, where cudaprep's auto puts the tensor; any device id is taken. The CPU path never
 * reads it: the same actions whatever it says. */
TEST (Pi0Infer, CudaDeviceIdIsCudaprepsRangeAndAutoAndTheCpuIgnoresIt)
{
  for (const char *name : {"cudaprep", "pi0infer"}) {
    ElementPtr e (gst_element_factory_make (name, nullptr));
    ASSERT_NE (e, nullptr) << name;
    GParamSpecInt *p = G_PARAM_SPEC_INT (
        g_object_class_find_property (G_OBJECT_GET_CLASS (e.get ()), "cuda-device-id"));
    ASSERT_NE (p, nullptr) << name;
    EXPECT_EQ (p->minimum, -1) << name;
    EXPECT_EQ (p->maximum, G_MAXINT) << name;
    EXPECT_EQ (p->default_value, -1) << name;
    gint id = 0;
    g_object_get (e.get (), "cuda-device-id", &id, nullptr);
    EXPECT_EQ (id, -1) << name;
  }
  auto run = [] (gint id) {
    Infer inf (make_infer ("builtin:pi0-tiny", "device", GST_PI0_DEVICE_CPU, "cuda-device-id", id,
                           nullptr));
    return inf.run (make_observation (3, 9));
  };
  const std::vector<float> a = run (-1);
  ASSERT_FALSE (a.empty ());
  EXPECT_EQ (run (0), a);
  EXPECT_EQ (run (100), a); /* no such device, and the CPU does not care */
}

/* precision reaches the policy as the value its nick names (the element's enum and
 * open_policy()'s are in one order): on the CPU auto is fp32, and bf16 weights give other
 * actions. */
TEST (Pi0Infer, PrecisionReachesThePolicyAsNamed)
{
  auto run = [] (const char *precision) {
    GstElement *e = make_infer ("builtin:pi0-tiny", "device", GST_PI0_DEVICE_CPU, nullptr);
    gst_util_set_object_arg (G_OBJECT (e), "precision", precision);
    Infer inf (e);
    return inf.run (make_observation (3, 9));
  };
  const std::vector<float> fp32 = run ("fp32");
  ASSERT_FALSE (fp32.empty ());
  EXPECT_EQ (run ("auto"), fp32);
  const std::vector<float> bf16 = run ("bf16");
  ASSERT_EQ (bf16.size (), fp32.size ());
  EXPECT_NE (bf16, fp32);
}
