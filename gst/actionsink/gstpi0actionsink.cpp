/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0actionsink
 * @title: pi0actionsink
 *
 * Sends the action chunks of #GstPi0ActionMeta to a robot, safely: a chunk holding any NaN or
 * infinite value is rejected whole; every action is clamped into the robot configuration's
 * joint limits and within its maximum change per tick of the previous command; actions from
 * observations older than #GstPi0ActionSink:max-action-age are dropped; a watchdog on the
 * pipeline clock sends HOLD after #GstPi0ActionSink:hold-timeout without a fresh action and
 * STOP after #GstPi0ActionSink:stop-timeout. HOLD is also sent on pause, flush and EOS.
 *
 * Targets: `udp://IP:PORT`, `tcp://IP:PORT` (non-blocking, reconnects with bounded backoff,
 * bounded send buffer), `file:///path` and `stdout`. Frames are described in docs/protocol.md.
 * A file or stdout whose writes fail is an error (#GstPi0ActionSink:tolerate-write-errors makes
 * it a warning and a counter).
 *
 * `mode=log` is for recordings and replays, not robots: every chunk is written whole, as the
 * policy produced it (no clamping, no age check, no HOLD/STOP, no robot-config needed), and
 * only to `file://` or `stdout`. Replaying a recording with the same seed gives the same log.
 *
 * The #GstPi0ActionSink:stats include the latency of each stage of the chain, from the
 * capture of the observation's base frame to the send, computed from the running-time stamps
 * that `pi0viewmux`, `cudaprep` and `pi0infer` leave in their metas.
 *
 * The rules live in protocol/: pi0::proto::Sender (the session: HELLO/HOLD/STOP, sequence
 * numbers, splitting, stream stepping, the watchdog, the safety gate, the robot's FEEDBACK),
 * pi0::proto::Transport, and pi0::proto::SenderLink, which drives the two together and says
 * what the properties mean. This file is the glue: properties, caps, render, the clock wait
 * and the bus.
 *
 * ## Example
 * |[
 * gst-launch-1.0 ... ! pi0infer ! pi0actionsink target=udp://127.0.0.1:9870 \
 *     robot-config=robot.json mode=stream control-rate=50
 * ]|
 *
 * Threads: the streaming thread (render, events), the control thread (ticks, watchdog; runs
 * only in PLAYING, waits on single-shot pipeline clock ids) and the application thread (state
 * changes). Locks: settings_lock (properties) and lock (everything else: the session, the
 * transport, stats). They are never held together. No lock is held while posting messages or
 * emitting the `action` signal; sockets are non-blocking, so sending under `lock` never waits
 * on a peer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0actionsink must be built without -ffast-math/-ffinite-math-only"
#endif

#include "gst/actionsink/gstpi0actionsink.h"

#include "gst/actionsink/pi0stagelatency.h"
#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"
#include "gst/common/pi0clockwait.h"
#include "gst/common/pi0notice.h"

#include "protocol/pi0link.h"

#include <gmodule.h>
#include <gst/pi0/pi0.h>

#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_action_sink_debug);
#define GST_CAT_DEFAULT gst_pi0_action_sink_debug

namespace
{

namespace proto = pi0::proto;

enum {
  PROP_0,
  PROP_TARGET,
  PROP_FORMAT,
  PROP_MODE,
  PROP_CONTROL_RATE,
  PROP_EXECUTE_STEPS,
  PROP_ROBOT_CONFIG,
  PROP_ALLOW_UNLIMITED,
  PROP_MAX_ACTION_AGE,
  PROP_HOLD_TIMEOUT,
  PROP_STOP_TIMEOUT,
  PROP_HMAC_KEY,
  PROP_MAX_SEND_BUFFER,
  PROP_DATAGRAM_SIZE,
  PROP_RECONNECT_MIN,
  PROP_RECONNECT_MAX,
  PROP_TOLERATE_WRITE_ERRORS,
  PROP_ROBOT_FEEDBACK,
  PROP_STATS,
};

enum { SIGNAL_ACTION, N_SIGNALS };
guint signals[N_SIGNALS];

/* The properties, each starting at its default (the param specs read them here): what they
 * mean for the session and the transport, and their defaults, are protocol/pi0link's
 * (proto::LinkOptions); start() has proto::configure_link() check and translate them. */
struct Settings {
  proto::LinkOptions link;
  bool tolerate_write_errors = false;
};
/* The enums' values are the protocol's, so a property copies straight into LinkOptions. */
static_assert ((int)proto::SendMode::kChunk == GST_PI0_ACTION_SINK_MODE_CHUNK &&
                   (int)proto::SendMode::kStream == GST_PI0_ACTION_SINK_MODE_STREAM &&
                   (int)proto::SendMode::kLog == GST_PI0_ACTION_SINK_MODE_LOG &&
                   (int)proto::Format::kAuto == GST_PI0_ACTION_SINK_FORMAT_AUTO &&
                   (int)proto::Format::kJson == GST_PI0_ACTION_SINK_FORMAT_JSON &&
                   (int)proto::Format::kBinary == GST_PI0_ACTION_SINK_FORMAT_BINARY,
               "property enums and protocol enums differ");

/* What to do once the lock is released: signals, bus warnings, an error. */
struct Pending {
  std::vector<proto::SentMessage> sent;
  std::vector<std::string> warnings;
  std::string error;
};

/* What the robot executes (first of each chunk, newest), to go upstream as pi0-executing. */
struct Executing {
  proto::Feedback fb;
  guint64 period_ns;
};

struct State {
  GstElement *element = nullptr; /* the sink, not owned: its running time */
  Settings s;                    /* snapshot taken in start() */
  bool started = false;
  proto::SenderLink link;
  proto::LinkOutput out; /* scratch, reused */
  bool unlocked = false;
  bool write_failed = false;

  /* While PLAYING: the clock the control thread waits on, and the base time. */
  GstClock *clock = nullptr;
  GstClockTime base_time = 0;

  guint64 no_meta = 0; /* buffers without an action meta (counted as rejected) */
  pi0::StageLatency latency;
  pi0::StageStamps stamps; /* of the last chunk given to the session */
  guint64 stamps_chunk = 0;
  bool have_stamps = false;
  guint64 warn_count = 0;

  /* The pi0-executing events in the order the session made them, and whether a thread is
   * sending them upstream (send_executing(): one at a time, so that they arrive in that order). */
  std::vector<Executing> executing;
  bool sending_executing = false;
};

} // namespace

struct GstPi0ActionSinkPrivate {
  std::mutex settings_lock;
  Settings settings; /* under settings_lock */
  std::mutex lock;
  State state; /* under lock */
  /* The control thread: ticks and the watchdog, at the link's deadlines (PLAYING only). */
  pi0::ClockWait wait;
};

struct _GstPi0ActionSink {
  GstBaseSink parent;
  GstPi0ActionSinkPrivate *priv;
};

#define gst_pi0_action_sink_parent_class parent_class
G_DEFINE_TYPE (GstPi0ActionSink, gst_pi0_action_sink, GST_TYPE_BASE_SINK);
GST_ELEMENT_REGISTER_DEFINE (pi0actionsink, "pi0actionsink", GST_RANK_NONE,
                             GST_TYPE_PI0_ACTION_SINK);

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_MEDIA_TYPE));

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_action_sink_mode_get_type, "GstPi0ActionSinkMode",
    {GST_PI0_ACTION_SINK_MODE_CHUNK, "Send each chunk whole when it arrives", "chunk"},
    {GST_PI0_ACTION_SINK_MODE_STREAM, "Send one action per control tick from the newest chunk",
     "stream"},
    {GST_PI0_ACTION_SINK_MODE_LOG,
     "Record every chunk whole, as the policy made it (file:// or stdout only; no limits, no "
     "age check, no HOLD)",
     "log"})

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_action_sink_format_get_type, "GstPi0ActionSinkFormat",
                          {GST_PI0_ACTION_SINK_FORMAT_AUTO,
                           "Binary for udp/tcp, JSON lines for file/stdout", "auto"},
                          {GST_PI0_ACTION_SINK_FORMAT_JSON, "One JSON object per line", "json"},
                          {GST_PI0_ACTION_SINK_FORMAT_BINARY, "Binary frames (docs/protocol.md)",
                           "binary"})

/* ---------------------------------------------------------------------------------------- */
/* Everything below that takes State & is called with priv->lock held.                       */

namespace
{

void
warn (State &st, Pending &p, const std::string &msg)
{
  GST_WARNING ("%s", msg.c_str ());
  /* Rate limit: post the 1st, 2nd, 4th, 8th... so a stream of bad chunks cannot flood the bus. */
  st.warn_count++;
  if ((st.warn_count & (st.warn_count - 1)) == 0)
    p.warnings.push_back (msg + " (" + std::to_string (st.warn_count) + " warnings so far)");
}

/* The running time, while PLAYING (st.clock set); NONE before: a prerolled chunk waits for it. */
GstClockTime
running_now (State &st)
{
  return st.clock ? gst_element_get_current_running_time (st.element) : GST_CLOCK_TIME_NONE;
}

/* Keeps what the link decided, to be signalled, posted and pushed once the lock is released. */
void
deliver (State &st, Pending &p)
{
  proto::LinkOutput &out = st.out;
  st.link.take (out);
  for (const std::string &e : out.write_errors) {
    /* A recording that loses data must say so. */
    if (st.s.tolerate_write_errors) {
      warn (st, p, e + ": message lost");
    } else if (!st.write_failed) {
      st.write_failed = true;
      p.error = e;
    }
  }
  for (proto::SentMessage &m : out.sent) {
    if (m.first_of_chunk && st.have_stamps && m.chunk_id == st.stamps_chunk)
      st.latency.add (st.stamps, m.time_ns); /* the chunk's first rows leave: its latency */
    p.sent.push_back (std::move (m));
  }
  for (const std::string &w : out.warnings)
    warn (st, p, w);
  for (const char *why : out.robot_drops) /* counted; a flood must not reach the bus */
    GST_INFO ("robot frame dropped: %s", why);
  for (const proto::Feedback &fb : out.executing)
    st.executing.push_back ({fb, st.link.settings ().period_ns});
}

/* Sends the queued pi0-executing events upstream, oldest first. The streaming thread (render)
 * and the control thread (ticks) both read the robot's reports; if each sent its own, one could
 * overtake the other between the lock and the push: pi0infer would take the sink's estimate of
 * a chunk's first row (render) after the robot's reports of later rows (the control thread) as
 * what the robot executes now, and pi0-sim's lock-step wait for the newest report never ended.
 * So one thread at a time sends everything queued, including what other threads queue
 * meanwhile; a thread that finds another sending leaves its events to it. No lock is held while
 * pushing. */
void
send_executing (GstPi0ActionSink *self)
{
  GstPi0ActionSinkPrivate *priv = self->priv;
  std::vector<Executing> batch;
  {
    std::lock_guard<std::mutex> lk (priv->lock);
    if (priv->state.sending_executing || priv->state.executing.empty ())
      return;
    priv->state.sending_executing = true;
  }
  for (;;) {
    batch.clear ();
    {
      std::lock_guard<std::mutex> lk (priv->lock);
      batch.swap (priv->state.executing);
      if (batch.empty ()) {
        priv->state.sending_executing = false;
        return;
      }
    }
    for (const Executing &e : batch)
      if (GST_CLOCK_TIME_IS_VALID (e.fb.time_ns))
        gst_pad_push_event (
            GST_BASE_SINK_PAD (self),
            gst_pi0_executing_event_new (e.fb.chunk_id, e.fb.row, e.fb.time_ns, e.period_ns));
  }
}

void
flush_pending (GstPi0ActionSink *self, Pending &p)
{
  for (auto &m : p.sent) {
    GBytes *b = g_bytes_new (m.values.data (), m.values.size () * sizeof (float));
    g_signal_emit (self, signals[SIGNAL_ACTION], 0, proto::kind_name (m.kind), m.chunk_id,
                   m.step_index, m.steps, m.dim, b);
    g_bytes_unref (b);
  }
  send_executing (self);
  pi0::Notices n;
  for (auto &w : p.warnings)
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED, w);
  if (!p.error.empty ())
    n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE, p.error,
             "set tolerate-write-errors=true to go on with a warning instead");
  GST_PI0_POST_NOTICES (self, n);
  p.sent.clear ();
  p.warnings.clear ();
  p.error.clear ();
}

/* The control thread's tick (pi0::ClockWait): the link's deadline has come. */
void
control_tick (GstPi0ActionSink *self)
{
  GstPi0ActionSinkPrivate *priv = self->priv;
  State &st = priv->state;
  Pending p;
  {
    std::lock_guard<std::mutex> lk (priv->lock);
    if (!st.clock)
      return;
    const GstClockTime now = running_now (st);
    st.link.pump (now);
    st.link.tick (now);
    deliver (st, p);
    priv->wait.follow (st.base_time + st.link.next_deadline (), nullptr);
  }
  flush_pending (self, p);
}

/* The link that serves ros2:// targets, from the pi0ros2 plugin (gst/ros2/, built with -Dros2):
 * found through the registry, so that this plugin needs nothing of ROS 2 to load. */
const Pi0ExternalLink *
find_external_link (const std::string &scheme, std::string *err, std::string *hint)
{
  *hint = "gst-pi0 must be built with ROS 2 (meson setup -Dros2=enabled, docs/ros2.md), and "
          "gst-inspect-1.0 pi0ros2 must list the plugin.";
  GstPlugin *found = gst_registry_find_plugin (gst_registry_get (), "pi0ros2");
  if (!found) {
    *err = "A " + scheme + ":// target needs the pi0ros2 plugin, which is not installed";
    return nullptr;
  }
  GstPlugin *plugin = gst_plugin_load (found);
  gst_object_unref (found);
  const gchar *file = plugin ? gst_plugin_get_filename (plugin) : nullptr;
  GModule *module = file ? g_module_open (file, G_MODULE_BIND_LAZY) : nullptr;
  gpointer sym = nullptr;
  if (!module || !g_module_symbol (module, PI0_EXTERNAL_LINK_SYMBOL, &sym) || !sym) {
    *err = "The pi0ros2 plugin could not be loaded" +
           std::string (module ? " (it has no robot link)" : "") +
           ": see GST_DEBUG=GST_PLUGIN_LOADING:5 for why";
    if (module)
      g_module_close (module);
    if (plugin)
      gst_object_unref (plugin);
    return nullptr;
  }
  /* The table lives in the plugin, which GStreamer never unloads. */
  g_module_make_resident (module);
  g_module_close (module);
  gst_object_unref (plugin);
  const Pi0ExternalLink *table = ((Pi0ExternalLinkGetFunc)sym) ();
  if (!table || table->abi != PI0_EXTERNAL_LINK_ABI) {
    *err = "The pi0ros2 plugin is from another build of gst-pi0 (robot link version " +
           std::to_string (table ? table->abi : 0u) + ", this sink needs " +
           std::to_string (PI0_EXTERNAL_LINK_ABI) + ")";
    return nullptr;
  }
  return table;
}

} // namespace

/* ---------------------------------------------------------------------------------------- */

static gboolean
gst_pi0_action_sink_start (GstBaseSink *bsink)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  GstPi0ActionSinkPrivate *priv = self->priv;
  Settings s;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    s = priv->settings;
  }
  proto::LinkConfig c;
  std::string err, hint;
  /* A target outside this plugin (ros2://) needs its link first; a bad target is
   * configure_link's to refuse. */
  proto::Target target;
  if (proto::parse_target (s.link.target, &target, &err) &&
      target.type == proto::TargetType::kExternal &&
      !(s.link.transport.external = find_external_link (target.scheme, &err, &hint))) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", err.c_str ()), ("%s", hint.c_str ()));
    return FALSE;
  }
  if (!proto::configure_link (s.link, &c, &err, &hint)) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", err.c_str ()),
                       ("%s", hint.empty () ? nullptr : hint.c_str ()));
    return FALSE;
  }
  Pending p;
  std::unique_lock<std::mutex> lk (priv->lock);
  State &st = priv->state;
  if (!st.link.open (c, &err)) {
    lk.unlock ();
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_WRITE,
                       ("Cannot open target %s: %s", s.link.target.c_str (), err.c_str ()),
                       (nullptr));
    return FALSE;
  }
  st.s = s;
  st.no_meta = 0;
  st.latency = pi0::StageLatency ();
  st.have_stamps = false;
  st.warn_count = 0;
  st.executing.clear (); /* the last run's, never sent */
  st.unlocked = false;
  st.write_failed = false;
  st.started = true;
  st.link.pump (GST_CLOCK_TIME_NONE); /* with a configuration: HELLO and HOLD now */
  deliver (st, p);
  const bool failed = st.write_failed;
  if (failed) {
    st.link.close ();
    st.started = false;
  }
  lk.unlock ();
  flush_pending (self, p);
  if (failed)
    return FALSE;
  static const char *const modes[] = {"chunk", "stream", "log"};
  GST_INFO_OBJECT (self, "sending to %s (%s, %s mode, %.1f Hz)", s.link.target.c_str (),
                   c.transport.binary ? "binary" : "json", modes[(int)s.link.mode],
                   s.link.control_rate);
  return TRUE;
}

static gboolean
gst_pi0_action_sink_stop (GstBaseSink *bsink)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  self->priv->wait.stop ();
  std::lock_guard<std::mutex> lk (self->priv->lock);
  State &st = self->priv->state;
  st.link.close ();
  st.started = false; /* the session stays for its counters until the next start */
  return TRUE;
}

static GstStateChangeReturn
gst_pi0_action_sink_change_state (GstElement *element, GstStateChange transition)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (element);
  GstPi0ActionSinkPrivate *priv = self->priv;

  if (transition == GST_STATE_CHANGE_PLAYING_TO_PAUSED) {
    /* Stop ticking first, then tell the robot to hold: nothing is sent after the HOLD. */
    Pending p;
    priv->wait.stop ();
    {
      std::lock_guard<std::mutex> lk (priv->lock);
      State &st = priv->state;
      if (st.started) {
        st.link.pump (running_now (st), false);
        st.link.event (running_now (st), proto::SenderEvent::kPaused);
        deliver (st, p);
      }
      g_clear_object (&st.clock);
    }
    flush_pending (self, p);
  }

  if (transition == GST_STATE_CHANGE_PAUSED_TO_PLAYING) {
    /* Before chaining up: the prerolled buffer is rendered as soon as the base class lets it
     * go, and it needs the clock to judge its age. The pipeline sets base_time before this. */
    GstClock *clock = gst_element_get_clock (element);
    if (!clock) {
      /* An element used alone has no pipeline clock: the system clock becomes its own. */
      clock = gst_system_clock_obtain ();
      gst_element_set_clock (element, clock);
    }
    std::unique_lock<std::mutex> lk (priv->lock);
    State &st = priv->state;
    if (st.started && !priv->wait.running ()) {
      g_clear_object (&st.clock);
      st.clock = clock;
      clock = nullptr;
      st.base_time = gst_element_get_base_time (element);
      st.link.event (running_now (st), proto::SenderEvent::kPlaying);
      if (st.s.link.mode != proto::SendMode::kLog) {
        priv->wait.start ("pi0actionsink-ctl",
                          [self] (GstClockTime, guint64) { control_tick (self); });
        priv->wait.follow (st.base_time + st.link.next_deadline (), st.clock);
      }
    }
    if (clock)
      gst_object_unref (clock);
  }

  GstStateChangeReturn ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE && transition == GST_STATE_CHANGE_PAUSED_TO_PLAYING) {
    priv->wait.stop ();
    std::lock_guard<std::mutex> lk (priv->lock);
    g_clear_object (&priv->state.clock);
  }

  return ret;
}

static gboolean
gst_pi0_action_sink_event (GstBaseSink *bsink, GstEvent *event)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  GstPi0ActionSinkPrivate *priv = self->priv;
  Pending p;
  std::optional<proto::SenderEvent> e;
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_FLUSH_START:
      e = proto::SenderEvent::kFlushStart;
      break;
    case GST_EVENT_EOS:
      e = proto::SenderEvent::kEos;
      break;
    case GST_EVENT_FLUSH_STOP:
      e = proto::SenderEvent::kFlushStop;
      break;
    case GST_EVENT_CUSTOM_DOWNSTREAM: {
      /* A new episode: the robot may have been reset, so the last episode's commands bound no
       * step of the next (the observation's measured state does). */
      GstPi0EpisodeAction action;
      if (gst_pi0_episode_event_parse (event, &action, nullptr) && action == GST_PI0_EPISODE_START)
        e = proto::SenderEvent::kEpisode;
      break;
    }
    default:
      break;
  }
  if (e) {
    std::lock_guard<std::mutex> g (priv->lock);
    State &st = priv->state;
    if (st.started) {
      st.link.event (running_now (st), *e);
      deliver (st, p);
    }
  }
  flush_pending (self, p);
  return GST_BASE_SINK_CLASS (parent_class)->event (bsink, event);
}

/* render never waits on a peer or the clock (sockets are non-blocking and sync is off), so there
 * is nothing to interrupt; the flag makes a render racing with a flush drop its chunk. */
static gboolean
set_unlocked (GstBaseSink *bsink, bool unlocked)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  std::lock_guard<std::mutex> g (self->priv->lock);
  self->priv->state.unlocked = unlocked;
  return TRUE;
}

static gboolean
gst_pi0_action_sink_unlock (GstBaseSink *bsink)
{
  return set_unlocked (bsink, true);
}

static gboolean
gst_pi0_action_sink_unlock_stop (GstBaseSink *bsink)
{
  return set_unlocked (bsink, false);
}

static GstFlowReturn
render_locked (State &st, GstBuffer *buf, Pending &p, std::string *error)
{
  GstPi0ActionMeta *meta = gst_buffer_get_pi0_action_meta (buf);
  if (!meta) {
    st.no_meta++;
    warn (st, p, "buffer without GstPi0ActionMeta: nothing sent");
    return GST_FLOW_OK;
  }
  if (!st.started || st.unlocked)
    return GST_FLOW_OK;
  const GstClockTime now = running_now (st);
  if (st.s.link.mode != proto::SendMode::kLog)
    st.link.pump (now);
  st.stamps = pi0::stage_stamps (buf, meta);
  st.stamps_chunk = meta->sequence;
  st.have_stamps = true;
  proto::ChunkIn in;
  in.values = meta->actions;
  in.horizon = meta->horizon;
  in.dim = meta->dim;
  in.chunk_id = meta->sequence;
  in.observation_time_ns = meta->observation_time;
  in.flagged_non_finite = (meta->flags & GST_PI0_ACTION_FLAG_NON_FINITE) != 0;
  in.model_id = meta->model_id ? meta->model_id : "";
  /* Where the robot measured itself at the observation: the reference of the first step after
   * an episode starts (the sender uses nothing else of it). */
  const GstPi0ObservationMeta *obs = gst_buffer_get_pi0_observation_meta (buf);
  if (obs && obs->state && obs->state_dim == meta->dim &&
      (obs->state_flags & GST_PI0_STATE_FLAG_PRESENT) &&
      !(obs->state_flags & GST_PI0_STATE_FLAG_STALE) &&
      proto::all_finite (obs->state, obs->state_dim))
    in.measured = obs->state;
  const proto::ChunkResult r = st.link.chunk (now, in, error);
  deliver (st, p);
  if (r == proto::ChunkResult::kError)
    return GST_FLOW_NOT_NEGOTIATED;
  return st.write_failed ? GST_FLOW_ERROR : GST_FLOW_OK;
}

static GstFlowReturn
gst_pi0_action_sink_render (GstBaseSink *bsink, GstBuffer *buf)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  GstPi0ActionSinkPrivate *priv = self->priv;
  Pending p;
  std::string error;
  GstFlowReturn ret;
  try {
    std::lock_guard<std::mutex> g (priv->lock);
    ret = render_locked (priv->state, buf, p, &error);
  } catch (const std::exception &e) {
    error = std::string ("internal error: ") + e.what ();
    ret = GST_FLOW_ERROR;
  }
  flush_pending (self, p);
  if (ret == GST_FLOW_NOT_NEGOTIATED) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                       ("Action chunk does not match the robot: %s", error.c_str ()),
                       ("nothing of this chunk was sent"));
  } else if (ret != GST_FLOW_OK && !error.empty ()) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED, ("%s", error.c_str ()), (nullptr));
  }
  return ret;
}

/* ---------------------------------------------------------------------------------------- */

static GstStructure *
make_stats (GstPi0ActionSinkPrivate *priv)
{
  std::lock_guard<std::mutex> g (priv->lock);
  State &st = priv->state;
  GstStructure *s = gst_structure_new_empty ("pi0actionsink-stats");
  for (const auto &[name, value] : st.link.stats (st.no_meta))
    gst_structure_set (s, name, G_TYPE_UINT64, (guint64)value, nullptr);
  st.latency.write (s);
  return s;
}

/* Copies @value into the settings (@set) or out of them: one table for both directions. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_FIELD (PROP_FORMAT, link.format, gint, enum)
    GST_PI0_PROP_FIELD (PROP_MODE, link.mode, gint, enum)
    GST_PI0_PROP_FIELD (PROP_CONTROL_RATE, link.control_rate, gdouble, double)
    GST_PI0_PROP_FIELD (PROP_EXECUTE_STEPS, link.sender.execute_steps, guint, uint)
    GST_PI0_PROP_FIELD (PROP_ALLOW_UNLIMITED, link.allow_unlimited, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_MAX_ACTION_AGE, link.sender.max_action_age_ns, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_HOLD_TIMEOUT, link.sender.hold_timeout_ns, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_STOP_TIMEOUT, link.sender.stop_timeout_ns, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_MAX_SEND_BUFFER, link.transport.max_send_buffer, guint, uint)
    GST_PI0_PROP_FIELD (PROP_DATAGRAM_SIZE, link.datagram_size, guint, uint)
    GST_PI0_PROP_FIELD (PROP_RECONNECT_MIN, link.transport.reconnect_min_ns, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_RECONNECT_MAX, link.transport.reconnect_max_ns, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_TOLERATE_WRITE_ERRORS, tolerate_write_errors, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_ROBOT_FEEDBACK, link.robot_feedback, gboolean, boolean)
    GST_PI0_PROP_STRING_OR (PROP_TARGET, link.target)
    GST_PI0_PROP_STRING (PROP_ROBOT_CONFIG, link.robot_config)
    case PROP_HMAC_KEY: /* write-only: a key must not be readable back */
      if (set) {
        s.link.hmac_key_set = g_value_get_string (value) != nullptr;
        s.link.hmac_key = s.link.hmac_key_set ? g_value_get_string (value) : "";
      }
      return true;
  }
  return false;
}

static void
gst_pi0_action_sink_set_property (GObject *object, guint prop_id, const GValue *value,
                                  GParamSpec *pspec)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (object);
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_action_sink_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (object);
  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, make_stats (self->priv));
    return;
  }
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_action_sink_finalize (GObject *object)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (object);
  self->priv->wait.stop ();
  {
    std::lock_guard<std::mutex> lk (self->priv->lock);
    self->priv->state.link.close ();
    g_clear_object (&self->priv->state.clock);
  }
  delete self->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_action_sink_init (GstPi0ActionSink *self)
{
  self->priv = new GstPi0ActionSinkPrivate ();
  self->priv->state.element = GST_ELEMENT (self);
  /* Send as soon as a chunk arrives: the observation's capture time, not the buffer's
   * timestamp, decides when each action is due, and waiting on the clock here would only add
   * latency (and make render block). */
  gst_base_sink_set_sync (GST_BASE_SINK (self), FALSE);
  /* Nobody needs the last chunk kept alive by the base class. */
  gst_base_sink_set_last_sample_enabled (GST_BASE_SINK (self), FALSE);
}

static void
gst_pi0_action_sink_class_init (GstPi0ActionSinkClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSinkClass *bsink_class = GST_BASE_SINK_CLASS (klass);

  GST_DEBUG_CATEGORY_INIT (gst_pi0_action_sink_debug, "pi0actionsink", 0, "Pi0 action sink");

  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_finalize);
  auto install = [gobject_class] (guint id, GParamSpec *ps) {
    g_object_class_install_property (gobject_class, id, ps);
  };
  const Settings d; /* every default: Settings' initialisers */

  /**
   * GstPi0ActionSink:target:
   *
   * Where actions go: `udp://IP:PORT`, `tcp://IP:PORT`, `file:///path` or `stdout`. Numeric
   * addresses only; examples use loopback, anything else must be set explicitly.
   */
  install (PROP_TARGET,
           g_param_spec_string (
               "target", "Target",
               "Where actions go: udp://IP:PORT, tcp://IP:PORT, file:///path, stdout, or "
               "ros2:///TOPIC[?type=trajectory|commands&...] (a ROS 2 controller, "
               "with the pi0ros2 plugin: docs/ros2.md)",
               d.link.target.c_str (), GST_PI0_PARAM_READY));
  install (
      PROP_FORMAT,
      g_param_spec_enum (
          "format", "Format",
          "Message encoding: auto (binary for udp/tcp, JSON lines for file/stdout), json or binary",
          gst_pi0_action_sink_format_get_type (), (gint)d.link.format, GST_PI0_PARAM_READY));
  install (PROP_MODE,
           g_param_spec_enum (
               "mode", "Mode",
               "chunk: send each chunk whole on arrival; stream: one action per control "
               "tick from the newest chunk; log: write every chunk whole and unmodified "
               "(file:// or stdout only: recordings, replays)",
               gst_pi0_action_sink_mode_get_type (), (gint)d.link.mode, GST_PI0_PARAM_READY));
  install (
      PROP_CONTROL_RATE,
      g_param_spec_double ("control-rate", "Control rate",
                           "Robot control rate in Hz: one chunk row per tick (also the step period "
                           "written in frames)",
                           0.1, 1000.0, d.link.control_rate, GST_PI0_PARAM_READY));
  install (PROP_EXECUTE_STEPS,
           g_param_spec_uint ("execute-steps", "Execute steps",
                              "Use at most this many rows of each chunk (0 = all rows)", 0,
                              G_MAXUINT, d.link.sender.execute_steps, GST_PI0_PARAM_READY));
  install (
      PROP_ROBOT_CONFIG,
      g_param_spec_string ("robot-config", "Robot configuration",
                           "JSON file with joints, lower/upper limits and max_step per tick; every "
                           "action is clamped to it",
                           nullptr, GST_PI0_PARAM_READY));
  install (PROP_ALLOW_UNLIMITED,
           g_param_spec_boolean (
               "allow-unlimited", "Allow unlimited",
               "Start without robot-config (actions are still checked for NaN/Inf but not clamped)",
               d.link.allow_unlimited, GST_PI0_PARAM_READY));
  install (PROP_MAX_ACTION_AGE,
           g_param_spec_uint64 (
               "max-action-age", "Maximum action age",
               "Drop actions whose observation was captured longer ago than this, in nanoseconds",
               GST_MSECOND, G_MAXUINT64, d.link.sender.max_action_age_ns, GST_PI0_PARAM_READY));
  install (PROP_HOLD_TIMEOUT,
           g_param_spec_uint64 (
               "hold-timeout", "Hold timeout",
               "Send HOLD after this long without a fresh action, in nanoseconds of pipeline clock",
               GST_MSECOND, G_MAXUINT64, d.link.sender.hold_timeout_ns, GST_PI0_PARAM_READY));
  install (PROP_STOP_TIMEOUT,
           g_param_spec_uint64 (
               "stop-timeout", "Stop timeout",
               "Send STOP after this long without a fresh action, in nanoseconds (>= hold-timeout)",
               GST_MSECOND, G_MAXUINT64, d.link.sender.stop_timeout_ns, GST_PI0_PARAM_READY));
  /* Write-only: a key must not be readable back through gst-inspect or a property dump. */
  install (
      PROP_HMAC_KEY,
      g_param_spec_string (
          "hmac-key", "HMAC key",
          "Shared key: when set, every binary frame carries an HMAC-SHA256 trailer (write-only)",
          nullptr, GST_PI0_PARAM_WRITE_ONLY));
  install (PROP_MAX_SEND_BUFFER,
           g_param_spec_uint (
               "max-send-buffer", "Maximum send buffer",
               "TCP: bytes queued for a slow peer before the oldest unsent frames are dropped",
               1024, 64 * 1024 * 1024, (guint)d.link.transport.max_send_buffer,
               GST_PI0_PARAM_READY));
  install (PROP_DATAGRAM_SIZE,
           g_param_spec_uint (
               "datagram-size", "Datagram size",
               "UDP: largest frame in bytes; bigger chunks are split per docs/protocol.md", 128,
               65507, (guint)d.link.datagram_size, GST_PI0_PARAM_READY));
  install (
      PROP_RECONNECT_MIN,
      g_param_spec_uint64 (
          "reconnect-min", "Reconnect minimum",
          "TCP: first reconnect delay in nanoseconds (doubles per failure up to reconnect-max)",
          GST_MSECOND, 60 * GST_SECOND, d.link.transport.reconnect_min_ns, GST_PI0_PARAM_READY));
  install (PROP_RECONNECT_MAX,
           g_param_spec_uint64 ("reconnect-max", "Reconnect maximum",
                                "TCP: longest reconnect delay in nanoseconds", GST_MSECOND,
                                600 * GST_SECOND, d.link.transport.reconnect_max_ns,
                                GST_PI0_PARAM_READY));
  install (PROP_TOLERATE_WRITE_ERRORS,
           g_param_spec_boolean ("tolerate-write-errors", "Tolerate write errors",
                                 "file/stdout: a failed write is a warning and counts in "
                                 "stats.write-errors instead of an error that stops the pipeline",
                                 d.tolerate_write_errors, GST_PI0_PARAM_READY));
  /**
   * GstPi0ActionSink:robot-feedback:
   *
   * Chunk mode over udp/tcp: take the robot's FEEDBACK reports (docs/protocol.md), checked, as
   * the reference of HOLD and of the next chunk's step bound and as what the `pi0-executing`
   * events upstream carry; until the first one of a session, and with false, the sink's own
   * estimate (what a robot that never reports gets).
   */
  install (PROP_ROBOT_FEEDBACK,
           g_param_spec_boolean ("robot-feedback", "Robot feedback",
                                 "Chunk mode over udp/tcp: use what the robot reports executing "
                                 "(FEEDBACK frames) instead of the sink's estimate",
                                 d.link.robot_feedback, GST_PI0_PARAM_READY));
  /**
   * GstPi0ActionSink:stats:
   *
   * Counters since start: sent (action rows), frames, rejected (chunks), clamped (rows), stale
   * (chunks), holds, stops, reconnects, dropped (frames), sessions, queued-bytes, write-errors,
   * feedback (robot reports taken), feedback-dropped (robot frames or bytes refused).
   *
   * End-to-end latency, from the stamps the upstream elements leave in the metas, over the
   * last 1024 chunks sent (in stream mode: when a chunk's first row leaves): `latency-chunks`
   * (chunks measured since start) and, for each stage, `STAGE-p50`, `STAGE-p99` and
   * `STAGE-max` in nanoseconds (guint64), where STAGE is `mux` (base frame's capture to the
   * muxer's push: the wait for the other views), `prep` (to cudaprep's push), `infer` (to
   * pi0infer's push: queueing and inference), `sink` (to the send) and `end-to-end` (capture
   * to send). A stage whose stamps are missing (no cudaprep, no clock) has no fields.
   */
  install (
      PROP_STATS,
      g_param_spec_boxed (
          "stats", "Statistics",
          "Counters: sent, frames, rejected, clamped, stale, holds, stops, reconnects, dropped, "
          "sessions, queued-bytes, write-errors, feedback, feedback-dropped; latency per stage "
          "(mux, prep, infer, sink, "
          "end-to-end) as STAGE-p50/-p99/-max in ns over the last 1024 chunks",
          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));

  /**
   * GstPi0ActionSink::action:
   * @sink: the element
   * @kind: "action", "hold" or "stop"
   * @chunk_id: the chunk's id (observation sequence), 0 for hold/stop
   * @step_index: chunk row of the first value row
   * @steps: rows in @values (0 for stop, and for a hold with no known position)
   * @dim: values per row
   * @values: @steps × @dim float32 exactly as sent (after clamping)
   *
   * Emitted after every message handed to the transport, from the thread that sent it
   * (streaming, control or application thread), with no lock held.
   */
  signals[SIGNAL_ACTION] =
      g_signal_new ("action", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, nullptr, nullptr,
                    nullptr, G_TYPE_NONE, 6, G_TYPE_STRING, G_TYPE_UINT64, G_TYPE_UINT, G_TYPE_UINT,
                    G_TYPE_UINT, G_TYPE_BYTES);

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 action sink", "Sink/Network",
      "Sends Pi0 action chunks to a robot: finite, clamped, fresh, framed", GST_PI0_AUTHOR);
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_change_state);
  bsink_class->start = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_start);
  bsink_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_stop);
  bsink_class->render = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_render);
  bsink_class->event = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_event);
  bsink_class->unlock = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_unlock);
  bsink_class->unlock_stop = GST_DEBUG_FUNCPTR (gst_pi0_action_sink_unlock_stop);

  gst_type_mark_as_plugin_api (gst_pi0_action_sink_mode_get_type (), (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (gst_pi0_action_sink_format_get_type (), (GstPluginAPIFlags)0);
}
