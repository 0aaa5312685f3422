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
 * The pads exist as soon as #GstPi0LeRobotSrc:location names a dataset (so a launch line can
 * link them); their data flows from PAUSED.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lerobot/gstpi0lerobotsrc.h"

#include "pi0lerobot.h"

#include <gst/app/gstappsrc.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_lerobot_src_debug);
#define GST_CAT_DEFAULT gst_pi0_lerobot_src_debug

namespace
{

enum {
  PROP_0,
  PROP_LOCATION,
  PROP_EPISODE,
  PROP_N_EPISODES,
};

/* One camera: its frames are restamped k / fps, frames outside the episode dropped. */
struct Branch {
  GstPi0LeRobotSrc *self = nullptr;
  std::string name;
  GstPad *ghost = nullptr;
  GstElement *conv = nullptr, *filter = nullptr;
  double from_ts = 0, to_ts = 0;
  int fps = 30;
  guint64 next = 0, length = 0;
  bool eos = false;
};

} // namespace

struct _GstPi0LeRobotSrc {
  GstBin parent;
  std::mutex *lock;
  std::string *location;
  guint episode;
  std::unique_ptr<pi0::lerobot::Reader> *reader;
  std::vector<Branch *> *branches;
  GstPad *state_pad;
  GstElement *state_src;
  bool built;
  /* The state buffers still to give the state appsrc (its need-data callback). */
  std::vector<GstBuffer *> *pending;
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
  for (Branch *b : *self->branches) {
    if (b->ghost)
      gst_element_remove_pad (GST_ELEMENT (self), b->ghost);
    delete b;
  }
  self->branches->clear ();
  if (self->state_pad)
    gst_element_remove_pad (GST_ELEMENT (self), self->state_pad);
  self->state_pad = nullptr;
  self->reader->reset ();
}

/* Reads the dataset and makes one pad per camera and the state pad. */
static bool
make_pads (GstPi0LeRobotSrc *self, std::string *error)
{
  clear_pads (self);
  auto r = pi0::lerobot::Reader::open (*self->location, error);
  if (!r)
    return false;
  for (auto &c : r->schema ().cameras) {
    Branch *b = new Branch ();
    b->self = self;
    const std::string prefix = "observation.images.";
    b->name = c.key.rfind (prefix, 0) == 0 ? c.key.substr (prefix.size ()) : c.key;
    b->ghost = gst_ghost_pad_new_no_target_from_template (
        b->name.c_str (), gst_element_class_get_pad_template (GST_ELEMENT_GET_CLASS (self), "%s"));
    gst_pad_set_active (b->ghost, TRUE);
    gst_element_add_pad (GST_ELEMENT (self), b->ghost);
    self->branches->push_back (b);
  }
  self->state_pad = gst_ghost_pad_new_no_target_from_template (
      "state", gst_element_class_get_pad_template (GST_ELEMENT_GET_CLASS (self), "%s"));
  gst_pad_set_active (self->state_pad, TRUE);
  gst_element_add_pad (GST_ELEMENT (self), self->state_pad);
  *self->reader = std::move (r);
  return true;
}

static GstPadProbeReturn
restamp (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  Branch *b = (Branch *)user_data;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
    if (b->eos)
      return GST_PAD_PROBE_DROP;
    if (!GST_BUFFER_PTS_IS_VALID (buf))
      return GST_PAD_PROBE_DROP;
    const double t = (double)GST_BUFFER_PTS (buf) / GST_SECOND;
    const double half = 0.5 / b->fps;
    if (t < b->from_ts - half)
      return GST_PAD_PROBE_DROP;
    if (t >= b->to_ts - half || b->next >= b->length) {
      b->eos = true;
      gst_pad_push_event (pad, gst_event_new_eos ());
      return GST_PAD_PROBE_DROP;
    }
    buf = gst_buffer_make_writable (buf);
    GST_BUFFER_PTS (buf) = gst_util_uint64_scale (b->next, GST_SECOND, b->fps);
    GST_BUFFER_DTS (buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION (buf) =
        gst_util_uint64_scale (b->next + 1, GST_SECOND, b->fps) - GST_BUFFER_PTS (buf);
    b->next++;
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
    } else if (GST_EVENT_TYPE (ev) == GST_EVENT_EOS && b->eos) {
      return GST_PAD_PROBE_DROP; /* already sent */
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
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (user_data);
  GstBuffer *b = nullptr;
  {
    std::lock_guard<std::mutex> g (*self->lock);
    if (!self->pending->empty ()) {
      b = self->pending->back ();
      self->pending->pop_back ();
    }
  }
  if (b)
    gst_app_src_push_buffer (src, b);
  else
    gst_app_src_end_of_stream (src);
}

/* filesrc ! decodebin ! videoconvert ! capsfilter (RGB-family and GBR: RGB; others: as
 * decoded) -> the camera's pad. */
static bool
build (GstPi0LeRobotSrc *self, std::string *error)
{
  auto &r = *self->reader;
  if (!r) {
    *error = "no dataset: set location";
    return false;
  }
  const auto &eps = r->episodes ();
  const pi0::lerobot::EpisodeInfo *ep = nullptr;
  for (auto &e : eps)
    if (e.index == (int64_t)self->episode)
      ep = &e;
  if (!ep) {
    *error = "the dataset has no episode " + std::to_string (self->episode) + " (it has " +
             std::to_string (eps.size ()) + ")";
    return false;
  }
  const int fps = r->schema ().fps;
  for (size_t c = 0; c < self->branches->size (); c++) {
    Branch *b = (*self->branches)[c];
    b->fps = fps;
    b->from_ts = ep->videos[c].from_ts;
    b->to_ts = ep->videos[c].to_ts;
    b->length = (guint64)ep->length;
    b->next = 0;
    b->eos = false;
    GstElement *src = gst_element_factory_make ("filesrc", nullptr);
    GstElement *dec = gst_element_factory_make ("decodebin", nullptr);
    b->conv = gst_element_factory_make ("videoconvert", nullptr);
    b->filter = gst_element_factory_make ("capsfilter", nullptr);
    if (!src || !dec || !b->conv || !b->filter) {
      *error = "filesrc, decodebin, videoconvert or capsfilter is missing";
      return false;
    }
    const std::string path = r->video_path (*ep, c);
    if (!g_file_test (path.c_str (), G_FILE_TEST_EXISTS)) {
      *error = "the video of camera " + b->name + " is missing: " + path;
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
    for (GstElement *e : {src, dec, b->conv, b->filter})
      gst_element_sync_state_with_parent (e);
  }
  /* The state: every frame's observation.state, k / fps. */
  std::vector<float> state, action;
  std::vector<double> ts;
  if (!r->read_frames (*ep, &state, &action, &ts, error))
    return false;
  const size_t dim = r->schema ().state_names.size ();
  self->state_src = gst_element_factory_make ("appsrc", nullptr);
  GstCaps *caps =
      gst_caps_new_simple (GST_PI0_STATE_MEDIA_TYPE, "dim", G_TYPE_INT, (gint)dim, nullptr);
  g_object_set (self->state_src, "caps", caps, "format", GST_FORMAT_TIME, "max-bytes", (guint64)0,
                nullptr);
  gst_caps_unref (caps);
  gst_bin_add (GST_BIN (self), self->state_src);
  GstPad *sp = gst_element_get_static_pad (self->state_src, "src");
  gst_ghost_pad_set_target (GST_GHOST_PAD (self->state_pad), sp);
  gst_object_unref (sp);
  for (size_t k = ts.size (); k-- > 0;) {
    GstBuffer *b = gst_buffer_new_memdup (state.data () + k * dim, dim * sizeof (float));
    GST_BUFFER_PTS (b) = gst_util_uint64_scale (k, GST_SECOND, fps);
    GST_BUFFER_DURATION (b) = gst_util_uint64_scale (k + 1, GST_SECOND, fps) - GST_BUFFER_PTS (b);
    self->pending->push_back (b); /* reversed: the next one is at the back */
  }
  GstAppSrcCallbacks cb = {};
  cb.need_data = feed_state;
  gst_app_src_set_callbacks (GST_APP_SRC (self->state_src), &cb, self, nullptr);
  gst_element_sync_state_with_parent (self->state_src);
  self->built = true;
  return true;
}

static gpointer
ref_object (gconstpointer o, gpointer)
{
  return gst_object_ref ((gpointer)o);
}

static void
teardown (GstPi0LeRobotSrc *self)
{
  GList *children = g_list_copy_deep (GST_BIN_CHILDREN (self), ref_object, nullptr);
  for (GList *l = children; l; l = l->next) {
    gst_element_set_state (GST_ELEMENT (l->data), GST_STATE_NULL);
    gst_bin_remove (GST_BIN (self), GST_ELEMENT (l->data));
  }
  g_list_free_full (children, gst_object_unref);
  for (Branch *b : *self->branches)
    if (b->ghost)
      gst_ghost_pad_set_target (GST_GHOST_PAD (b->ghost), nullptr);
  if (self->state_pad)
    gst_ghost_pad_set_target (GST_GHOST_PAD (self->state_pad), nullptr);
  self->state_src = nullptr;
  self->built = false;
  std::lock_guard<std::mutex> g (*self->lock);
  for (GstBuffer *b : *self->pending)
    gst_buffer_unref (b);
  self->pending->clear ();
}

static GstStateChangeReturn
gst_pi0_lerobot_src_change_state (GstElement *element, GstStateChange transition)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (element);
  if (transition == GST_STATE_CHANGE_NULL_TO_READY) {
    std::string err;
    if (!*self->reader) {
      if (self->location->empty ()) {
        GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("No location: set the dataset directory"),
                           (nullptr));
        return GST_STATE_CHANGE_FAILURE;
      }
      if (!make_pads (self, &err)) {
        GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("Cannot read the dataset: %s", err.c_str ()),
                           (nullptr));
        return GST_STATE_CHANGE_FAILURE;
      }
    }
    if (!build (self, &err)) {
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("Cannot play the episode: %s", err.c_str ()),
                         (nullptr));
      teardown (self);
      return GST_STATE_CHANGE_FAILURE;
    }
  }
  GstStateChangeReturn ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_READY_TO_NULL)
    teardown (self);
  return ret;
}

static void
gst_pi0_lerobot_src_set_property (GObject *object, guint prop_id, const GValue *value,
                                  GParamSpec *pspec)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (object);
  switch (prop_id) {
    case PROP_LOCATION: {
      *self->location = g_value_get_string (value) ? g_value_get_string (value) : "";
      std::string err;
      if (!self->location->empty () && !make_pads (self, &err))
        GST_WARNING_OBJECT (self, "%s", err.c_str ()); /* an error again at start */
      break;
    }
    case PROP_EPISODE:
      self->episode = g_value_get_uint (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  }
}

static void
gst_pi0_lerobot_src_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (object);
  switch (prop_id) {
    case PROP_LOCATION:
      g_value_set_string (value, self->location->c_str ());
      break;
    case PROP_EPISODE:
      g_value_set_uint (value, self->episode);
      break;
    case PROP_N_EPISODES:
      g_value_set_uint (value, *self->reader ? (guint)(*self->reader)->episodes ().size () : 0);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  }
}

static void
gst_pi0_lerobot_src_finalize (GObject *object)
{
  GstPi0LeRobotSrc *self = GST_PI0_LEROBOT_SRC (object);
  for (Branch *b : *self->branches)
    delete b;
  delete self->branches;
  for (GstBuffer *b : *self->pending)
    gst_buffer_unref (b);
  delete self->pending;
  delete self->reader;
  delete self->location;
  delete self->lock;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_lerobot_src_init (GstPi0LeRobotSrc *self)
{
  self->lock = new std::mutex ();
  self->location = new std::string ();
  self->reader = new std::unique_ptr<pi0::lerobot::Reader> ();
  self->branches = new std::vector<Branch *> ();
  self->pending = new std::vector<GstBuffer *> ();
  self->episode = 0;
  self->state_pad = nullptr;
  self->state_src = nullptr;
  self->built = false;
  GST_OBJECT_FLAG_SET (self, GST_ELEMENT_FLAG_SOURCE);
}

static void
gst_pi0_lerobot_src_class_init (GstPi0LeRobotSrcClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  gobject_class->set_property = gst_pi0_lerobot_src_set_property;
  gobject_class->get_property = gst_pi0_lerobot_src_get_property;
  gobject_class->finalize = gst_pi0_lerobot_src_finalize;
  g_object_class_install_property (
      gobject_class, PROP_LOCATION,
      g_param_spec_string (
          "location", "Location", "The dataset's directory (LeRobotDataset v3)", nullptr,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property (
      gobject_class, PROP_EPISODE,
      g_param_spec_uint (
          "episode", "Episode", "Index of the episode to play", 0, G_MAXUINT, 0,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property (
      gobject_class, PROP_N_EPISODES,
      g_param_spec_uint ("n-episodes", "Episodes", "Episodes in the dataset", 0, G_MAXUINT, 0,
                         (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 LeRobot dataset player", "Source/Video",
      "Plays an episode of a LeRobotDataset v3: its cameras and robot state, frame by frame",
      "gst-pi0");
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_src_change_state);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_lerobot_src_debug, "pi0lerobotsrc", 0, "LeRobotDataset player");
}
