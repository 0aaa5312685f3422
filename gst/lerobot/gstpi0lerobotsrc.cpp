/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0lerobotsrc
 * @title: pi0lerobotsrc
 *
 * Plays one episode of a LeRobotDataset v3 into the chain, not live: one source pad per camera
 * (named after the feature, `observation.images.main` gives `main`) with the decoded frames,
 * and a `state` pad with `observation.state` as `application/x-pi0-state` buffers. Frame k of
 * the episode has PTS k / fps on every pad, so `pi0viewmux` pairs exactly the frames and the
 * state that were recorded together, and a policy can be evaluated offline on recorded data.
 * Videos are decoded with decodebin (H.264 from `pi0lerobotsink`, AV1 or others as the
 * installed decoders allow); a camera recorded as GBR (lossless RGB) comes out as RGB.
 *
 * ## Example
 * |[
 * gst-launch-1.0 pi0lerobotsrc location=/data/pick episode=3 name=ds \
 *   ds.main ! queue ! mux.main  ds.side ! queue ! mux.side  ds.top ! queue ! mux.top \
 *   ds.state ! queue ! mux.state  pi0viewmux name=mux ! cudaprep ! pi0infer ! ...
 * ]|
 *
 * The dataset is read when the element goes to READY: then the pads appear (sometimes pads:
 * a launch line links them as they come, an application from `pad-added` or once READY) and
 * #GstPi0LeRobotSrc:n-episodes is known; their data flows from PAUSED.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/lerobot/gstpi0lerobotsrc.h"

#include "gst/common/gstpi0props.h"

#include "lerobot/pi0lerobot.h"
#include "lerobot/pi0lerobotmp4.h"

#include <gst/app/gstappsrc.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_lerobot_src_debug);
#define GST_CAT_DEFAULT gst_pi0_lerobot_src_debug

/* Threads and locks. The application thread sets properties and changes state; each camera's
 * branch streams on its own threads (decodebin's), the state on the appsrc's.
 *  - settings_lock guards Settings, the properties; held only to copy them.
 *  - The element's STATE_LOCK guards State: change_state runs under it (the dataset is read at
 *    READY, the branches are built at PAUSED and torn down), and n-episodes takes it to read
 *    the dataset. The branches' streaming threads touch only their own Branch (its phase is
 *    atomic: handle_message reads it on the threads that post); the list of branches changes
 *    only between NULL and READY, when no branch element exists.
 *  - pending_lock guards pending, the state buffers the appsrc's need-data callback (its
 *    streaming thread) takes one by one, against build and teardown filling and clearing it.
 * Lock order: STATE_LOCK (held by GStreamer around change_state, which posts its errors as
 * every element does), then settings_lock or pending_lock; those two are never held together,
 * nor while pushing or posting. */

namespace
{

enum {
  PROP_0,
  PROP_LOCATION,
  PROP_EPISODE,
  PROP_N_EPISODES,
  PROP_SEND_INSTRUCTION,
};

/* The properties, each starting at its default (the param specs read them here). */
struct Settings {
  std::string location; /* NULL when empty */
  guint episode = 0;
  bool send_instruction = true;
};

/* The state pad's instructions: each frame's task (meta/tasks.parquet through the frame's
 * task_index), sent as a pi0-instruction event before the episode's first state and before each
 * state whose task differs from the one before. Owned by the pad probe that sends them; touched
 * only on the state appsrc's streaming thread. */
struct Instructions {
  std::vector<std::string> task; /* per episode frame */
  std::string sent;
  bool any_sent = false;
};

/* One camera. Its file may hold many episodes (LeRobot concatenates them): frame k of the
 * episode is the file's frame want[k], counted in presentation order from the file's first
 * frame, as LeRobot's decoder (torchcodec) indexes it: round((from_timestamp + timestamp_k) *
 * fps). The file is decoded from its start; frames outside the episode are dropped, those in it
 * restamped k / fps. */
struct Branch {
  std::string name;
  GstElement *owner = nullptr;
  GstPad *ghost = nullptr;
  GstElement *conv = nullptr, *filter = nullptr;
  GstElement *file = nullptr, *dec = nullptr; /* filesrc and decodebin, for handle_message */
  int fps = 30;
  std::vector<int64_t> want; /* file frame index of each episode frame, increasing */
  size_t next = 0;           /* the next episode frame to give */
  GstClockTime origin = GST_CLOCK_TIME_NONE; /* PTS of the file's first frame */
  guint64 decoded = 0;
  guint64 missing = 0; /* episode frames the file does not have */
  enum { PLAYING, SENDING_EOS, DONE };
  /* Written on the branch's streaming thread, read where its elements post messages. */
  std::atomic<int> phase{PLAYING};
};

/* From READY: the dataset, its pads and, from PAUSED, the branches that play it. Changed by
 * state changes only (the application thread, under the element's STATE_LOCK). */
struct State {
  std::unique_ptr<pi0::lerobot::Reader> reader;
  std::vector<Branch *> branches;
  GstPad *state_pad = nullptr;
  GstElement *state_src = nullptr;
  bool built = false;
};

} // namespace

struct GstPi0LeRobotSrcPrivate {
  std::mutex settings_lock; /* guards settings; held only to copy them */
  Settings settings;
  State state;             /* under the element's STATE_LOCK (state changes, n-episodes) */
  std::mutex pending_lock; /* guards pending */
  /* The state buffers still to give the state appsrc, the next one at the back. */
  std::vector<GstBuffer *> pending;
};

struct _GstPi0LeRobotSrc {
  GstBin parent;
  GstPi0LeRobotSrcPrivate *priv;
};

#define gst_pi0_lerobot_src_parent_class parent_class
G_DEFINE_TYPE (GstPi0LeRobotSrc, gst_pi0_lerobot_src, GST_TYPE_BIN);
GST_ELEMENT_REGISTER_DEFINE (pi0lerobotsrc, "pi0lerobotsrc", GST_RANK_NONE,
                             GST_TYPE_PI0_LEROBOT_SRC);

static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE ("%s", GST_PAD_SRC, GST_PAD_SOMETIMES, GST_STATIC_CAPS_ANY);

static void
clear_pads (GstPi0LeRobotSrc *self)
{
  State &st = self->priv->state;
  for (Branch *b : st.branches) {
    if (b->ghost)
      gst_element_remove_pad (GST_ELEMENT (self), b->ghost);
    delete b;
  }
  st.branches.clear ();
  if (st.state_pad)
    gst_element_remove_pad (GST_ELEMENT (self), st.state_pad);
  st.state_pad = nullptr;
  st.reader.reset ();
}

/* Reads the dataset at @location and makes one pad per camera and the state pad. */
static bool
make_pads (GstPi0LeRobotSrc *self, const std::string &location, std::string *error)
{
  State &st = self->priv->state;
  clear_pads (self);
  auto r = pi0::lerobot::Reader::open (location, error);
  if (!r)
    return false;
  for (auto &c : r->schema ().cameras) {
    Branch *b = new Branch ();
    const std::string prefix = "observation.images.";
    b->name = c.key.rfind (prefix, 0) == 0 ? c.key.substr (prefix.size ()) : c.key;
    b->ghost = gst_ghost_pad_new_no_target_from_template (
        b->name.c_str (), gst_element_class_get_pad_template (GST_ELEMENT_GET_CLASS (self), "%s"));
    gst_pad_set_active (b->ghost, TRUE);
    gst_element_add_pad (GST_ELEMENT (self), b->ghost);
    st.branches.push_back (b);
  }
  st.state_pad = gst_ghost_pad_new_no_target_from_template (
      "state", gst_element_class_get_pad_template (GST_ELEMENT_GET_CLASS (self), "%s"));
  gst_pad_set_active (st.state_pad, TRUE);
  gst_element_add_pad (GST_ELEMENT (self), st.state_pad);
  st.reader = std::move (r);
  return true;
}

/* Ends the branch: EOS downstream now, and upstream is told to stop (the rest of the file is
 * not decoded). */
static void
finish_branch (Branch *b, GstPad *pad)
{
  b->phase = Branch::SENDING_EOS;
  gst_pad_push_event (pad, gst_event_new_eos ());
  b->phase = Branch::DONE;
}

static GstPadProbeReturn
restamp (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  Branch *b = (Branch *)user_data;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
    if (b->phase != Branch::PLAYING) {
      gst_buffer_unref (buf);
      GST_PAD_PROBE_INFO_DATA (info) = nullptr;
      GST_PAD_PROBE_INFO_FLOW_RETURN (info) = GST_FLOW_EOS;
      return GST_PAD_PROBE_HANDLED;
    }
    /* The frame's index in the file: from its PTS against the first frame's (a frame the
     * decoder could not give leaves a hole, not a shift), or its count without a PTS. */
    int64_t idx = (int64_t)b->decoded++;
    if (GST_BUFFER_PTS_IS_VALID (buf)) {
      if (!GST_CLOCK_TIME_IS_VALID (b->origin))
        b->origin = GST_BUFFER_PTS (buf);
      const double dt = ((double)GST_BUFFER_PTS (buf) - (double)b->origin) / GST_SECOND;
      idx = (int64_t)std::llround (dt * b->fps);
    }
    GST_LOG_OBJECT (b->owner,
                    "camera %s: file frame %" G_GINT64_FORMAT " (pts %" GST_TIME_FORMAT
                    "), next episode frame %" G_GSIZE_FORMAT,
                    b->name.c_str (), idx, GST_TIME_ARGS (GST_BUFFER_PTS (buf)), b->next);
    while (b->next < b->want.size () && b->want[b->next] < idx) {
      /* The first hole is posted; later ones only counted (in the debug log). */
      if (b->missing++ == 0)
        GST_ELEMENT_WARNING (b->owner, STREAM, DECODE,
                             ("The video of camera %s lacks frame %" G_GSIZE_FORMAT
                              " of the episode: the frames around it keep their times",
                              b->name.c_str (), b->next),
                             ("file frame %" G_GINT64_FORMAT " never came", b->want[b->next]));
      GST_DEBUG_OBJECT (b->owner, "camera %s: no frame %" G_GSIZE_FORMAT, b->name.c_str (),
                        b->next);
      b->next++;
    }
    if (b->next >= b->want.size ()) {
      finish_branch (b, pad);
      gst_buffer_unref (buf);
      GST_PAD_PROBE_INFO_DATA (info) = nullptr;
      GST_PAD_PROBE_INFO_FLOW_RETURN (info) = GST_FLOW_EOS;
      return GST_PAD_PROBE_HANDLED;
    }
    if (idx < b->want[b->next])
      return GST_PAD_PROBE_DROP; /* before the episode (or between its frames) */
    const guint64 k = b->next++;
    buf = gst_buffer_make_writable (buf);
    GST_BUFFER_PTS (buf) = gst_util_uint64_scale (k, GST_SECOND, b->fps);
    GST_BUFFER_DTS (buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION (buf) =
        gst_util_uint64_scale (k + 1, GST_SECOND, b->fps) - GST_BUFFER_PTS (buf);
    GST_PAD_PROBE_INFO_DATA (info) = buf;
    return GST_PAD_PROBE_OK;
  }
  if (info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);
    if (GST_EVENT_TYPE (ev) == GST_EVENT_SEGMENT) {
      /* The restamped frames run from 0. */
      GstSegment seg;
      gst_segment_init (&seg, GST_FORMAT_TIME);
      GstEvent *ne = gst_event_new_segment (&seg);
      gst_event_set_seqnum (ne, gst_event_get_seqnum (ev));
      gst_event_unref (ev);
      GST_PAD_PROBE_INFO_DATA (info) = ne;
    } else if (GST_EVENT_TYPE (ev) == GST_EVENT_CAPS) {
      /* A file at another rate than info.json's fps would be indexed wrongly: refuse it. */
      GstCaps *caps;
      gst_event_parse_caps (ev, &caps);
      gint n = 0, d = 1;
      const GstStructure *st = gst_caps_get_structure (caps, 0);
      if (st && gst_structure_get_fraction (st, "framerate", &n, &d) && n > 0 && d > 0 &&
          std::fabs ((double)n / d - b->fps) > 0.01 * b->fps) {
        GST_ELEMENT_ERROR (b->owner, STREAM, FORMAT,
                           ("The video of camera %s is at %.3f fps, info.json says %d",
                            b->name.c_str (), (double)n / d, b->fps),
                           (nullptr));
        b->phase = Branch::DONE;
        return GST_PAD_PROBE_DROP;
      }
    } else if (GST_EVENT_TYPE (ev) == GST_EVENT_EOS) {
      if (b->phase == Branch::DONE)
        return GST_PAD_PROBE_DROP; /* already ended */
      if (b->phase == Branch::PLAYING && b->next < b->want.size ()) {
        /* The file ended inside the episode. */
        b->missing += b->want.size () - b->next;
        GST_ELEMENT_WARNING (b->owner, STREAM, DECODE,
                             ("The video of camera %s ends %" G_GSIZE_FORMAT
                              " frames before the episode does",
                              b->name.c_str (), b->want.size () - b->next),
                             (nullptr));
        b->next = b->want.size ();
      }
    }
  }
  return GST_PAD_PROBE_OK;
}

static void
on_decoded_pad (GstElement *decodebin, GstPad *pad, gpointer user_data)
{
  Branch *b = (Branch *)user_data;
  GstCaps *caps = gst_pad_get_current_caps (pad);
  if (!caps)
    caps = gst_pad_query_caps (pad, nullptr);
  const GstStructure *s = gst_caps_get_structure (caps, 0);
  const bool video = gst_structure_has_name (s, "video/x-raw");
  gst_caps_unref (caps);
  if (!video)
    return;
  GstPad *sinkpad = gst_element_get_static_pad (b->conv, "sink");
  if (!gst_pad_is_linked (sinkpad))
    gst_pad_link (pad, sinkpad);
  gst_object_unref (sinkpad);
}

static void
feed_state (GstAppSrc *src, guint length, gpointer user_data)
{
  GstPi0LeRobotSrcPrivate *priv = GST_PI0_LEROBOT_SRC (user_data)->priv;
  GstBuffer *b = nullptr;
  {
    std::lock_guard<std::mutex> g (priv->pending_lock);
    if (!priv->pending.empty ()) {
      b = priv->pending.back ();
      priv->pending.pop_back ();
    }
  }
  if (b)
    gst_app_src_push_buffer (src, b);
  else
    gst_app_src_end_of_stream (src);
}

/* filesrc ! decodebin ! videoconvert ! capsfilter (RGB-family and GBR: RGB; others: as
 * decoded) -> the camera's pad. */
/* Before state k (its buffer offset), the instruction when it is new. */
static GstPadProbeReturn
send_instruction (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  Instructions *in = static_cast<Instructions *> (user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  const guint64 k = GST_BUFFER_OFFSET (buf);
  if (k >= in->task.size () || (in->any_sent && in->task[k] == in->sent))
    return GST_PAD_PROBE_OK;
  in->sent = in->task[k];
  in->any_sent = true;
  GST_DEBUG_OBJECT (pad, "frame %" G_GUINT64_FORMAT ": instruction \"%s\"", k, in->sent.c_str ());
  gst_pad_push_event (pad, gst_pi0_instruction_event_new (in->sent.c_str ()));
  return GST_PAD_PROBE_OK;
}

static bool
build (GstPi0LeRobotSrc *self, guint episode, bool instructions, std::string *error)
{
  GstPi0LeRobotSrcPrivate *priv = self->priv;
  State &st = priv->state;
  auto &r = st.reader;
  if (!r) {
    *error = "no dataset: set location";
    return false;
  }
  const auto &eps = r->episodes ();
  const pi0::lerobot::EpisodeInfo *ep = nullptr;
  for (auto &e : eps)
    if (e.index == (int64_t)episode)
      ep = &e;
  if (!ep) {
    *error = "the dataset has no episode " + std::to_string (episode) + " (it has " +
             std::to_string (eps.size ()) + ")";
    return false;
  }
  const int fps = r->schema ().fps;
  /* The state (and the frames' timestamps, which say which video frames are the episode's). */
  std::vector<float> state, action;
  std::vector<double> ts;
  std::vector<int64_t> task_index;
  if (!r->read_frames (*ep, &state, &action, &ts, error, &task_index))
    return false;
  for (size_t c = 0; c < st.branches.size (); c++) {
    Branch *b = st.branches[c];
    b->owner = GST_ELEMENT (self);
    b->fps = fps;
    b->want.clear ();
    for (double t : ts)
      b->want.push_back ((int64_t)std::llround ((ep->videos[c].from_ts + t) * fps));
    for (size_t k = 1; k < b->want.size (); k++)
      if (b->want[k] <= b->want[k - 1]) {
        *error = "frames " + std::to_string (k - 1) + " and " + std::to_string (k) +
                 " of the episode are the same video frame of camera " + b->name +
                 ": its timestamps are closer than a frame at " + std::to_string (fps) + " fps";
        return false;
      }
    b->next = 0;
    b->origin = GST_CLOCK_TIME_NONE;
    b->decoded = 0;
    b->missing = 0;
    b->phase = Branch::PLAYING;
    GstElement *src = gst_element_factory_make ("filesrc", nullptr);
    GstElement *dec = gst_element_factory_make ("decodebin", nullptr);
    b->conv = gst_element_factory_make ("videoconvert", nullptr);
    b->filter = gst_element_factory_make ("capsfilter", nullptr);
    if (!src || !dec || !b->conv || !b->filter) {
      *error = "filesrc, decodebin, videoconvert or capsfilter is missing";
      return false;
    }
    /* The file checked before anything decodes it: a missing, empty, truncated or foreign
     * file, or one whose stream is not the camera's of info.json, is refused here, while the
     * state change can still fail (found by decodebin on its own threads it could leave
     * gst-launch-1.0 hanging). */
    const std::string path = r->video_path (*ep, c);
    const pi0::lerobot::Camera &cam = r->schema ().cameras[c];
    pi0::lerobot::Mp4Video video;
    std::string why;
    if (!pi0::lerobot::probe_mp4 (path, &video, &why)) {
      why = "the video of camera " + b->name + " cannot be played: " + why;
    } else if (!pi0::lerobot::codec_matches (cam.codec, video.sample_entry)) {
      why = "the video of camera " + b->name + " holds " + video.sample_entry +
            ", info.json says " + cam.codec + ": " + path;
    } else if (cam.width && cam.height &&
               (video.width != cam.width || video.height != cam.height)) {
      why = "the video of camera " + b->name + " is " + std::to_string (video.width) + "x" +
            std::to_string (video.height) + ", info.json says " + std::to_string (cam.width) + "x" +
            std::to_string (cam.height) + ": " + path;
    }
    if (!why.empty ()) {
      *error = why;
      gst_object_unref (src);
      gst_object_unref (dec);
      return false;
    }
    g_object_set (src, "location", path.c_str (), nullptr);
    /* A lossless RGB camera decodes as GBR: back to packed RGB (exact, a reordering). */
    const std::string pix = r->schema ().cameras[c].pix_fmt;
    if (pix == "gbrp" || pix == "gbr24p" || pix == "rgb24") {
      GstCaps *fc = gst_caps_from_string ("video/x-raw,format=RGB");
      g_object_set (b->filter, "caps", fc, nullptr);
      gst_caps_unref (fc);
    }
    b->file = src;
    b->dec = dec;
    gst_bin_add_many (GST_BIN (self), src, dec, b->conv, b->filter, nullptr);
    gst_element_link (src, dec);
    gst_element_link (b->conv, b->filter);
    g_signal_connect (dec, "pad-added", G_CALLBACK (on_decoded_pad), b);
    GstPad *out = gst_element_get_static_pad (b->filter, "src");
    gst_pad_add_probe (
        out, (GstPadProbeType)(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
        restamp, b, nullptr);
    gst_ghost_pad_set_target (GST_GHOST_PAD (b->ghost), out);
    gst_object_unref (out);
    /* Active before anything streams into it: the element's own activation comes only after
     * this (in the parent class's READY to PAUSED), and a push into an inactive ghost pad is
     * refused as flushing, which stops a source for good. */
    gst_pad_set_active (b->ghost, TRUE);
    /* Downstream first, as a bin changes state: decodebin streams from its own threads as soon
     * as it is PAUSED, and a frame or sticky event that reaches a videoconvert still in NULL
     * (pads flushing) is refused as flushing, which stopped the branch for good without an
     * error or EOS (seen as an episode that never ended, now and then, under load). */
    for (GstElement *e : {b->filter, b->conv, dec, src})
      gst_element_sync_state_with_parent (e);
  }
  /* The state: every frame's observation.state, k / fps. */
  const size_t dim = r->schema ().state_names.size ();
  st.state_src = gst_element_factory_make ("appsrc", nullptr);
  GstCaps *caps =
      gst_caps_new_simple (GST_PI0_STATE_MEDIA_TYPE, "dim", G_TYPE_INT, (gint)dim, nullptr);
  g_object_set (st.state_src, "caps", caps, "format", GST_FORMAT_TIME, "max-bytes", (guint64)0,
                nullptr);
  gst_caps_unref (caps);
  gst_bin_add (GST_BIN (self), st.state_src);
  GstPad *sp = gst_element_get_static_pad (st.state_src, "src");
  if (instructions) {
    auto *in = new Instructions ();
    for (int64_t t : task_index)
      in->task.push_back (r->tasks ()[t]);
    gst_pad_add_probe (sp, GST_PAD_PROBE_TYPE_BUFFER, send_instruction, in,
                       [] (gpointer p) { delete static_cast<Instructions *> (p); });
  }
  gst_ghost_pad_set_target (GST_GHOST_PAD (st.state_pad), sp);
  gst_object_unref (sp);
  gst_pad_set_active (st.state_pad, TRUE); /* as the cameras' */
  for (size_t k = ts.size (); k-- > 0;) {
    GstBuffer *b = gst_buffer_new_memdup (state.data () + k * dim, dim * sizeof (float));
    GST_BUFFER_PTS (b) = gst_util_uint64_scale (k, GST_SECOND, fps);
    GST_BUFFER_DURATION (b) = gst_util_uint64_scale (k + 1, GST_SECOND, fps) - GST_BUFFER_PTS (b);
    GST_BUFFER_OFFSET (b) = k; /* the episode frame, for send_instruction */
    std::lock_guard<std::mutex> g (priv->pending_lock);
    priv->pending.push_back (b); /* reversed: the next one is at the back */
  }
  GstAppSrcCallbacks cb = {};
  cb.need_data = feed_state;
  gst_app_src_set_callbacks (GST_APP_SRC (st.state_src), &cb, self, nullptr);
  gst_element_sync_state_with_parent (st.state_src);
  st.built = true;
  return true;
}

static gpointer
ref_object (gconstpointer o, gpointer)
{
  return gst_object_ref ((gpointer)o);
}

/* Once a branch has ended (its episode's last frame given, or its file refused), its upstream
 * was told to stop with GST_FLOW_EOS, and what it does after that is not the pipeline's
 * business: a decoder may still be inside a frame when it learns it, and some then fail the
 * next one (libaom's av1dec, now and then, with "Failed to decode frame"). Such an error, from
 * a branch's filesrc or decodebin after the branch ended, is logged and dropped; every error
 * before then goes on as it is. */
static void
gst_pi0_lerobot_src_handle_message (GstBin *bin, GstMessage *msg)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (bin);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR ||
      GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
    GstObject *from = GST_MESSAGE_SRC (msg);
    for (Branch *b : self->priv->state.branches) {
      if (b->phase.load () == Branch::PLAYING || !from)
        continue;
      const bool inside = (b->file && from == GST_OBJECT (b->file)) ||
                          (b->dec && (from == GST_OBJECT (b->dec) ||
                                      gst_object_has_as_ancestor (from, GST_OBJECT (b->dec))));
      if (!inside)
        continue;
      GError *err = nullptr;
      gchar *dbg = nullptr;
      if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
        gst_message_parse_error (msg, &err, &dbg);
      else
        gst_message_parse_warning (msg, &err, &dbg);
      GST_DEBUG_OBJECT (self, "camera %s ended: dropping %s from %s: %s (%s)", b->name.c_str (),
                        GST_MESSAGE_TYPE_NAME (msg), GST_OBJECT_NAME (from),
                        err ? err->message : "", dbg ? dbg : "");
      g_clear_error (&err);
      g_free (dbg);
      gst_message_unref (msg);
      return;
    }
  }
  GST_BIN_CLASS (parent_class)->handle_message (bin, msg);
}

static void
teardown (GstPi0LeRobotSrc *self)
{
  GstPi0LeRobotSrcPrivate *priv = self->priv;
  State &st = priv->state;
  GList *children = g_list_copy_deep (GST_BIN_CHILDREN (self), ref_object, nullptr);
  for (GList *l = children; l; l = l->next) {
    gst_element_set_state (GST_ELEMENT (l->data), GST_STATE_NULL);
    gst_bin_remove (GST_BIN (self), GST_ELEMENT (l->data));
  }
  g_list_free_full (children, gst_object_unref);
  for (Branch *b : st.branches) {
    b->file = b->dec = nullptr;
    if (b->ghost)
      gst_ghost_pad_set_target (GST_GHOST_PAD (b->ghost), nullptr);
  }
  if (st.state_pad)
    gst_ghost_pad_set_target (GST_GHOST_PAD (st.state_pad), nullptr);
  st.state_src = nullptr;
  st.built = false;
  std::lock_guard<std::mutex> g (priv->pending_lock);
  for (GstBuffer *b : priv->pending)
    gst_buffer_unref (b);
  priv->pending.clear ();
}

static GstStateChangeReturn
gst_pi0_lerobot_src_change_state (GstElement *element, GstStateChange transition)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (element);
  GstPi0LeRobotSrcPrivate *priv = self->priv;
  Settings s;
  {
    std::lock_guard<std::mutex> lk (priv->settings_lock);
    s = priv->settings;
  }
  std::string err;
  if (transition == GST_STATE_CHANGE_NULL_TO_READY) {
    /* The dataset is read here, never in set_property: the pads appear now. */
    if (s.location.empty ()) {
      GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("No location: set the dataset directory"),
                         (nullptr));
      return GST_STATE_CHANGE_FAILURE;
    }
    if (!make_pads (self, s.location, &err)) {
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("Cannot read the dataset: %s", err.c_str ()),
                         (nullptr));
      clear_pads (self);
      return GST_STATE_CHANGE_FAILURE;
    }
  }
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED &&
      !build (self, s.episode, s.send_instruction, &err)) {
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("Cannot play the episode: %s", err.c_str ()),
                       (nullptr));
    teardown (self);
    return GST_STATE_CHANGE_FAILURE;
  }
  GstStateChangeReturn ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    teardown (self);
  if (transition == GST_STATE_CHANGE_READY_TO_NULL)
    clear_pads (self);
  return ret;
}

/* Copies @value into the settings (@set) or out of them: one table for both directions. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING (PROP_LOCATION, location)
    GST_PI0_PROP_FIELD (PROP_EPISODE, episode, guint, uint)
    GST_PI0_PROP_FIELD (PROP_SEND_INSTRUCTION, send_instruction, gboolean, boolean)
  }
  return false;
}

static void
gst_pi0_lerobot_src_set_property (GObject *object, guint prop_id, const GValue *value,
                                  GParamSpec *pspec)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (object);
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_lerobot_src_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (object);
  if (prop_id == PROP_N_EPISODES) {
    /* Known from READY, when the dataset has been read (state changes hold the state lock). */
    GST_STATE_LOCK (self);
    const auto &r = self->priv->state.reader;
    g_value_set_uint (value, r ? (guint)r->episodes ().size () : 0);
    GST_STATE_UNLOCK (self);
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_lerobot_src_finalize (GObject *object)
{
  GstPi0LeRobotSrcPrivate *priv = GST_PI0_LEROBOT_SRC (object)->priv;
  for (Branch *b : priv->state.branches)
    delete b;
  for (GstBuffer *b : priv->pending)
    gst_buffer_unref (b);
  delete priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_lerobot_src_init (GstPi0LeRobotSrc *self)
{
  self->priv = new GstPi0LeRobotSrcPrivate ();
  GST_OBJECT_FLAG_SET (self, GST_ELEMENT_FLAG_SOURCE);
}

static void
gst_pi0_lerobot_src_class_init (GstPi0LeRobotSrcClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_src_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_src_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_src_finalize);
  const Settings d; /* every default: Settings' initialisers */
  /**
   * GstPi0LeRobotSrc:location:
   *
   * The dataset's directory, read when the element goes to READY.
   */
  g_object_class_install_property (
      gobject_class, PROP_LOCATION,
      g_param_spec_string ("location", "Location", "The dataset's directory (LeRobotDataset v3)",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_EPISODE,
                                   g_param_spec_uint ("episode", "Episode",
                                                      "Index of the episode to play", 0, G_MAXUINT,
                                                      d.episode, GST_PI0_PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_N_EPISODES,
                                   g_param_spec_uint ("n-episodes", "Episodes",
                                                      "Episodes in the dataset (known from READY)",
                                                      0, G_MAXUINT, 0, GST_PI0_PARAM_READ_ONLY));
  g_object_class_install_property (
      gobject_class, PROP_SEND_INSTRUCTION,
      g_param_spec_boolean (
          "send-instruction", "Send instruction",
          "Send each frame's task (meta/tasks.parquet) on the state pad as a pi0-instruction "
          "event, before the episode's first state and wherever the task changes: pi0infer "
          "follows it, pi0lerobotsink records it",
          d.send_instruction, GST_PI0_PARAM_READY));
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 LeRobot dataset player", "Source/Video",
      "Plays an episode of a LeRobotDataset v3: its cameras and robot state, frame by frame",
      GST_PI0_AUTHOR);
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_src_change_state);
  GST_BIN_CLASS (klass)->handle_message = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_src_handle_message);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_lerobot_src_debug, "pi0lerobotsrc", 0, "LeRobotDataset player");
}
