/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "tools/pi0-sim/pi0simloop.h"

#include "tools/pi0-sim/pi0simgst.h"
#include "tools/pi0-sim/pi0simmotion.h"
#include "tools/pi0-sim/pi0simsocket.h"

#include "tools/common/pi0elementstats.h"
#include "protocol/pi0frame.h"
#include "protocol/pi0safety.h"
#include "protocol/pi0session.h"
#include "sim/pi0simrender.h"

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

/* ------------------------------------------------------------------------------------------ */
/* A clock that stands still until the loop moves it: the pipeline's time is the world's.      */
/* ------------------------------------------------------------------------------------------ */

G_BEGIN_DECLS
#define PI0_TYPE_SIM_CLOCK (pi0_sim_clock_get_type ())
G_DECLARE_FINAL_TYPE (Pi0SimClock, pi0_sim_clock, PI0, SIM_CLOCK, GstClock)
G_END_DECLS

struct _Pi0SimClock {
  GstClock parent;
  GMutex lock;
  GCond cond;
  GstClockTime now;
};

G_DEFINE_TYPE (Pi0SimClock, pi0_sim_clock, GST_TYPE_CLOCK)

static GstClockTime
pi0_sim_clock_get_internal_time (GstClock *clock)
{
  Pi0SimClock *self = PI0_SIM_CLOCK (clock);
  g_mutex_lock (&self->lock);
  const GstClockTime t = self->now;
  g_mutex_unlock (&self->lock);
  return t;
}

/* Blocks until the loop has moved the time to the entry's, or the entry is unscheduled. */
static GstClockReturn
pi0_sim_clock_wait (GstClock *clock, GstClockEntry *entry, GstClockTimeDiff *jitter)
{
  Pi0SimClock *self = PI0_SIM_CLOCK (clock);
  g_mutex_lock (&self->lock);
  while (__atomic_load_n (&GST_CLOCK_ENTRY_STATUS (entry), __ATOMIC_SEQ_CST) !=
             GST_CLOCK_UNSCHEDULED &&
         self->now < GST_CLOCK_ENTRY_TIME (entry))
    g_cond_wait (&self->cond, &self->lock);
  const bool unscheduled =
      __atomic_load_n (&GST_CLOCK_ENTRY_STATUS (entry), __ATOMIC_SEQ_CST) == GST_CLOCK_UNSCHEDULED;
  if (jitter)
    *jitter = GST_CLOCK_DIFF (GST_CLOCK_ENTRY_TIME (entry), self->now);
  g_mutex_unlock (&self->lock);
  return unscheduled ? GST_CLOCK_UNSCHEDULED : GST_CLOCK_OK;
}

static void
pi0_sim_clock_unschedule (GstClock *clock, GstClockEntry *entry)
{
  Pi0SimClock *self = PI0_SIM_CLOCK (clock);
  g_mutex_lock (&self->lock);
  __atomic_store_n (&GST_CLOCK_ENTRY_STATUS (entry), GST_CLOCK_UNSCHEDULED, __ATOMIC_SEQ_CST);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

static void
pi0_sim_clock_finalize (GObject *object)
{
  Pi0SimClock *self = PI0_SIM_CLOCK (object);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (pi0_sim_clock_parent_class)->finalize (object);
}

static void
pi0_sim_clock_class_init (Pi0SimClockClass *klass)
{
  GstClockClass *clock_class = GST_CLOCK_CLASS (klass);
  clock_class->get_internal_time = pi0_sim_clock_get_internal_time;
  clock_class->wait = pi0_sim_clock_wait;
  clock_class->unschedule = pi0_sim_clock_unschedule;
  G_OBJECT_CLASS (klass)->finalize = pi0_sim_clock_finalize;
}

static void
pi0_sim_clock_init (Pi0SimClock *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->now = 0;
  GST_OBJECT_FLAG_SET (self, GST_CLOCK_FLAG_CAN_DO_SINGLE_SYNC);
}

static void
pi0_sim_clock_set (Pi0SimClock *self, GstClockTime t)
{
  g_mutex_lock (&self->lock);
  self->now = t;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

namespace pi0::tools::sim
{

using namespace pi0::sim; /* the world, its cameras, its expert */

namespace
{

using ClockPtr = tools::ObjectPtr<Pi0SimClock>;

/* The chunks the expert made, by the observation time they answer: the driver fills it before
 * it pushes the observation, the probe on the streaming thread takes from it. */
struct ExpertChunks {
  std::mutex lock;
  std::map<GstClockTime, std::vector<std::vector<float>>> by_time;
};

GstPadProbeReturn
attach_expert_chunk (GstPad *, GstPadProbeInfo *info, gpointer data)
{
  auto *chunks = static_cast<ExpertChunks *> (data);
  GstBuffer *buf = gst_pad_probe_info_get_buffer (info);
  const GstPi0ObservationMeta *obs = gst_buffer_get_pi0_observation_meta (buf);
  if (!obs)
    return GST_PAD_PROBE_OK;
  std::vector<std::vector<float>> rows;
  {
    std::lock_guard<std::mutex> lk (chunks->lock);
    auto it = chunks->by_time.find (obs->observation_time);
    if (it == chunks->by_time.end ())
      return GST_PAD_PROBE_OK; // no chunk: the sink gets nothing to send
    rows = std::move (it->second);
    chunks->by_time.erase (it);
  }
  std::vector<float> flat;
  for (const auto &r : rows)
    flat.insert (flat.end (), r.begin (), r.end ());
  const guint64 sequence = obs->sequence;
  const GstClockTime t = obs->observation_time;
  buf = gst_buffer_make_writable (buf);
  GST_PAD_PROBE_INFO_DATA (info) = buf;
  GstPi0ActionMeta *meta = gst_buffer_add_pi0_action_meta (
      buf, (guint)rows.size (), (guint)rows[0].size (), flat.data (), "pi0-sim-expert");
  meta->sequence = sequence;
  meta->observation_time = t;
  meta->inference_time = 0;
  meta->done_time = t;
  return GST_PAD_PROBE_OK;
}

/* What reached the action sink, by observation time: whether the sink was handed a chunk it
 * may send (an action meta whose values are all finite). A policy that makes none for an
 * observation (it skipped it, or its values are not finite: the sink refuses those whole) sends
 * the robot nothing, and the loop must not wait for a chunk that will not come.
 * With a delay, a sendable chunk waits here (the gate) until the loop has run the world to its
 * arrival and released it. */
struct SinkArrivals {
  std::mutex lock;
  std::condition_variable changed;
  std::map<GstClockTime, bool> sendable;
  /* Hold sendable chunks until released: set (with a delay) before the chain plays, never later.
   * Set only once the loop waited for the second observation's chunk, it let a chunk that came
   * sooner through at once, whole (the clock still at its observation): the robot ran rows of
   * ticks already past, in the episodes where the chain's thread had been quicker. */
  bool gate = false;
  bool any_released = false;
  GstClockTime released = 0; /* chunks for observations at or before this pass */
  bool opened = false;       /* the episode ends: everything passes */
};

GstPadProbeReturn
note_sink_arrival (GstPad *, GstPadProbeInfo *info, gpointer data)
{
  auto *arrivals = static_cast<SinkArrivals *> (data);
  GstBuffer *buf = gst_pad_probe_info_get_buffer (info);
  const GstPi0ObservationMeta *obs = gst_buffer_get_pi0_observation_meta (buf);
  if (!obs)
    return GST_PAD_PROBE_OK;
  GstPi0ActionMeta *a = gst_buffer_get_pi0_action_meta (buf);
  const bool ok = a && !(a->flags & GST_PI0_ACTION_FLAG_NON_FINITE) && a->horizon > 0 &&
                  proto::all_finite (a->actions, (size_t)a->horizon * a->dim);
  const GstClockTime t = obs->observation_time;
  std::unique_lock<std::mutex> lk (arrivals->lock);
  arrivals->sendable[t] = ok;
  arrivals->changed.notify_all ();
  if (ok && arrivals->gate)
    arrivals->changed.wait (lk, [&] {
      return arrivals->opened || (arrivals->any_released && arrivals->released >= t);
    });
  return GST_PAD_PROBE_OK;
}

/* The pi0-executing events the sink sends upstream (what the robot reports executing): how
 * many, and the row of each chunk they named. */
struct ExecutingEvents {
  std::mutex lock;
  uint64_t count = 0;
  std::map<uint64_t, guint> row_by_chunk;
};

GstPadProbeReturn
note_executing (GstPad *, GstPadProbeInfo *info, gpointer data)
{
  auto *events = static_cast<ExecutingEvents *> (data);
  GstEvent *e = gst_pad_probe_info_get_event (info);
  guint64 chunk = 0, period = 0;
  guint row = 0;
  GstClockTime t = GST_CLOCK_TIME_NONE;
  if (GST_EVENT_TYPE (e) == GST_EVENT_CUSTOM_UPSTREAM &&
      gst_event_has_name (e, GST_PI0_EXECUTING_EVENT_NAME) &&
      gst_pi0_executing_event_parse (e, &chunk, &row, &t, &period)) {
    std::lock_guard<std::mutex> lk (events->lock);
    events->count++;
    events->row_by_chunk[chunk] = row;
  }
  return GST_PAD_PROBE_OK;
}

using pi0::tools::stat_u64;

/* pi0actionsink emits `action` after it has sent a message: a handler connected after the
 * recorder's runs once the recorder has read the send time (on the loop's clock), so the loop
 * moves the clock on only after that (else a fast robot would move it under the recorder). */
void
count_sent_action (GstElement *, const gchar *kind, guint64, guint, guint, guint, GBytes *,
                   gpointer data)
{
  if (g_strcmp0 (kind, "action") == 0)
    static_cast<std::atomic<unsigned> *> (data)->fetch_add (1);
}

class Episode
{
public:
  Episode (const LoopOptions &o, const proto::RobotConfig &robot, uint64_t seed)
      : o_ (o), world_ (robot, seed, o.scene),
        period_ ((GstClockTime)std::llround (1e9 / o.scene.control_rate))
  {
  }

  bool run (EpisodeResult *result, std::string *error)
  {
    if (!socket_.open ("127.0.0.1", 0, error) || !build (error))
      return false;
    proto::ReceiverSettings rs;
    rs.robot = world_.robot ();
    rx_ = std::make_unique<proto::Receiver> (rs);
    arrivals_.gate = !o_.real_time && o_.delay_ns > 0 && !o_.sync;
    gst_element_set_state (pipeline_.get (), GST_STATE_PLAYING);
    trace_.push_back ({world_.joints (), 0, false});
    bool ok = true;
    if (o_.real_time)
      ok = run_real_time (result, error);
    else
      while (ok && !world_.done ())
        ok = observe_and_execute (result, error);
    if (policy_) {
      result->guided = (unsigned)stat_u64 (policy_.get (), "rtc-guided");
      result->delay_rows = (unsigned)stat_u64 (policy_.get (), "rtc-delay");
    }
    finish (ok, error);
    measure_motion (trace_, period_ / 1e9, result);
    result->seed = world_.seed ();
    result->instruction = world_.instruction ();
    result->outcome = world_.outcome ();
    result->ticks = world_.decided_at ();
    result->rejected = (unsigned)rx_->counters ().rejected;
    result->executed = (unsigned)rx_->counters ().executed;
    result->tick_rows = std::move (tick_rows_);
    return ok;
  }

private:
  bool build (std::string *error)
  {
    const unsigned n = o_.execute;
    const std::string instruction = world_.instruction ();
    std::string policy;
    if (o_.policy == "expert") {
      policy = "identity name=policy";
    } else {
      policy = "cudaprep width=" + std::to_string (o_.prep_size) +
               " height=" + std::to_string (o_.prep_size) + " ! pi0infer name=policy model=\"" +
               o_.policy + "\" instruction=\"" + instruction +
               "\" action-dims=3 seed=" + std::to_string (world_.seed ()) + " " +
               o_.infer_properties;
    }
    // The sink's watchdog counts on this clock too: it must not hold between two observations
    // (n rows apart) of the lock-step loop.
    const GstClockTime hold = (n + 2 + sync_holds ()) * period_;
    std::string line =
        "pi0viewmux name=mux ! tee name=obs obs. ! queue ! " + policy +
        (o_.overlay.empty () ? "" : " ! tee name=plan") +
        " ! pi0actionsink name=robot target=udp://127.0.0.1:" + std::to_string (socket_.port ()) +
        " robot-config=\"" + o_.robot_config +
        "\" mode=chunk control-rate=" + std::to_string (o_.scene.control_rate) +
        " max-action-age=" + std::to_string (hold) + " hold-timeout=" + std::to_string (hold) +
        " stop-timeout=" + std::to_string (2 * hold);
    if (!o_.record.empty ())
      line += " obs. ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=0"
              " ! pi0lerobotsink name=dataset location=\"" +
              o_.record + "\" append=true action-sink=robot robot-type=pi0-sim-planar lossless=" +
              (o_.lossless ? "true" : "false") + " instruction=\"" + instruction + "\"";
    for (const Feed &f : kFeeds) {
      line += std::string (" appsrc name=cam_") + f.pad;
      if (!o_.overlay.empty () && f.camera == Camera::Overhead)
        line += std::string (" ! tee name=maincam ! queue ! mux.") + f.pad;
      else
        line += std::string (" ! mux.") + f.pad;
    }
    line += " appsrc name=state ! mux.state";
    if (!o_.overlay.empty ()) {
      if (g_mkdir_with_parents (o_.overlay.c_str (), 0755) != 0) {
        *error = "cannot make the --overlay directory " + o_.overlay;
        return false;
      }
      /* The overhead view with the chunk made from it: the tool's path drawn where the camera
       * sees it (the renderer's own projection). wait-actions: each frame waits for its own
       * chunk, so which thread runs first changes no picture. Not synchronised to the clock
       * (it stands still while the chain works). */
      const auto p = overhead_projection (o_.camera_width, o_.camera_height);
      const auto &l = o_.scene.links;
      char geometry[256];
      std::snprintf (geometry, sizeof geometry,
                     "links=\"%g,%g,%g\" projection=\"%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\"", l[0], l[1],
                     l[2], p[0], p[1], p[2], p[3], p[4], p[5]);
      line +=
          " plan. ! queue ! ov.actions_sink maincam. ! queue ! videoconvert ! "
          "video/x-raw,format=BGRx ! pi0overlay name=ov mode=planar max-age=0 wait-actions=true " +
          std::string (geometry) +
          " ! videoconvert ! pngenc ! multifilesink sync=false async=false location=\"" +
          o_.overlay + "/" + std::to_string (world_.seed ()) + "-%03d.png\"";
    }
    pipeline_ = tools::launch (line, error);
    if (!pipeline_) {
      *error = "the chain: " + *error;
      return false;
    }
    GstElement *p = pipeline_.get ();
    if (!o_.real_time) {
      clock_.reset (PI0_SIM_CLOCK (g_object_new (PI0_TYPE_SIM_CLOCK, nullptr)));
      gst_pipeline_use_clock (GST_PIPELINE (p), GST_CLOCK (clock_.get ()));
    }
    const int fps_num = (int)std::lround (o_.scene.control_rate);
    for (const Feed &f : kFeeds) {
      GstElement *src = gst_bin_get_by_name (GST_BIN (p), (std::string ("cam_") + f.pad).c_str ());
      GstCaps *caps =
          gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING, "RGB", "width", G_TYPE_INT,
                               o_.camera_width, "height", G_TYPE_INT, o_.camera_height, "framerate",
                               GST_TYPE_FRACTION, fps_num, (int)n, nullptr);
      g_object_set (src, "caps", caps, "format", GST_FORMAT_TIME, "is-live", (gboolean)o_.real_time,
                    "max-bytes", (guint64)0, nullptr);
      /* Real time: a frame is pushed after all three are drawn, which takes a while on a busy
       * machine; a camera's latency says how long (one period: the muxer pairs at once when
       * every input has delivered, this is only how long it may wait). */
      if (o_.real_time)
        g_object_set (src, "min-latency", (gint64)period_, "max-latency", (gint64)period_, nullptr);
      gst_caps_unref (caps);
      cams_.emplace_back (src);
    }
    GstElement *state = gst_bin_get_by_name (GST_BIN (p), "state");
    GstCaps *caps = gst_caps_new_simple ("application/x-pi0-state", "dim", G_TYPE_INT, 3, nullptr);
    g_object_set (state, "caps", caps, "format", GST_FORMAT_TIME, "is-live", (gboolean)o_.real_time,
                  nullptr);
    if (o_.real_time)
      g_object_set (state, "min-latency", (gint64)period_, "max-latency", (gint64)period_, nullptr);
    gst_caps_unref (caps);
    state_.reset (state);
    GstElement *robot = gst_bin_get_by_name (GST_BIN (p), "robot");
    GstPad *sink_pad = gst_element_get_static_pad (robot, "sink");
    gst_pad_add_probe (sink_pad, GST_PAD_PROBE_TYPE_BUFFER, note_sink_arrival, &arrivals_, nullptr);
    gst_pad_add_probe (sink_pad, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, note_executing, &executing_,
                       nullptr);
    gst_object_unref (sink_pad);
    g_signal_connect_after (robot, "action", G_CALLBACK (count_sent_action), &signalled_);
    sink_.reset (robot);
    if (o_.policy != "expert")
      policy_.reset (gst_bin_get_by_name (GST_BIN (p), "policy"));
    else {
      GstElement *id = gst_bin_get_by_name (GST_BIN (p), "policy");
      GstPad *pad = gst_element_get_static_pad (id, "src");
      gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, attach_expert_chunk, &expert_, nullptr);
      gst_object_unref (pad);
      gst_object_unref (id);
    }
    return true;
  }

  bool push (GstElement *src, GstBuffer *buf, GstClockTime t)
  {
    // Lasting until the next observation: the muxer then knows this pad has nothing more for
    // this one (docs/elements/pi0viewmux.md), without waiting for the next.
    return push_timed (src, buf, t, o_.execute * period_);
  }

  /* One observation at the world's tick, its chunk, and its first `execute` rows run. */
  bool observe_and_execute (EpisodeResult *result, std::string *error)
  {
    if (!settle_feedback (error))
      return false;
    const GstClockTime v = world_.ticks () * period_;
    pi0_sim_clock_set (clock_.get (), v);
    // The first chunk of an episode is not held: it prerolls the chain, which is PLAYING (its
    // running time the world's) only once it has. Released before it is pushed; every later
    // one waits at the gate until the world has run to its arrival.
    bool held = o_.delay_ns > 0 && observations_ > 0 && !o_.sync;
    const bool waits = o_.sync && observations_ > 0; // the synchronous baseline's wait
    observations_++;
    if (!held)
      release (v);
    if (!capture (v, error))
      return false;
    if (held && !playing_) {
      // The first chunk's preroll has set the chain PLAYING; a chunk held before that would
      // hold the state change, and the running time would no longer be the world's.
      if (gst_element_get_state (pipeline_.get (), nullptr, nullptr,
                                 (GstClockTime)(o_.timeout_s * GST_SECOND)) !=
          GST_STATE_CHANGE_SUCCESS) {
        *error = "the chain did not start playing";
        tools::pop_error (pipeline_.get (), error);
        return false;
      }
      playing_ = true;
    }
    if (held) {
      bool sendable = false;
      if (!wait_arrival (v, &sendable, error))
        return false;
      held = sendable; // nothing is coming: no wait
    }
    const GstClockTime arrival = v + (held ? o_.delay_ns : 0);
    bool pending = true; // the chunk (or that there is none) has not reached the robot yet
    // t == execute is the next observation's time, not a tick of this one: a chunk that comes
    // after this observation's last tick (a delay over execute - 1 periods) reaches the robot
    // then, before the next observation (else it would stay at the gate, and the next one
    // behind it).
    for (unsigned t = 0; t <= o_.execute && !world_.done (); t++) {
      const GstClockTime now = v + t * period_;
      if (pending && now >= arrival) {
        if (held) {
          pi0_sim_clock_set (clock_.get (), arrival);
          release (v);
        }
        bool answered = false;
        if (!wait_chunk (v, arrival, &answered, error))
          return false;
        if (answered)
          result->chunks++;
        else
          result->unanswered++; // the robot goes on with what it has (or holds), as a robot would
        pending = false;
        if (waits)
          wait_for_chunk ();
      }
      if (t == o_.execute || world_.done ())
        break;
      pi0_sim_clock_set (clock_.get (), now); // forward only: the arrival lies before @now
      tick (now);
    }
    pi0_sim_clock_set (clock_.get (), world_.ticks () * period_);
    return true;
  }

  /* Control ticks the synchronous baseline holds for before each chunk (but the first). */
  unsigned sync_holds () const
  {
    return o_.sync ? (unsigned)((o_.delay_ns + period_ - 1) / period_) : 0;
  }

  /* The synchronous baseline: the robot holds still while the chunk is computed (the world,
   * and the blocks on it, go on), its time on the world's tick count only: the chain's clock
   * jumps over it at the next observation. The new chunk's first row is then a switch (from
   * the last row run before the wait). */
  void wait_for_chunk ()
  {
    for (unsigned h = 0; h < sync_holds () && !world_.done (); h++) {
      world_.hold ();
      trace_.push_back ({world_.joints (), 0, false});
      tick_rows_.push_back ({0, 0, std::vector<float> ()});
    }
  }

  /* Real time: the world ticks at the control rate on the pipeline's clock (the system's),
   * capturing an observation every `execute` ticks; between ticks the robot takes the frames
   * that come, stamped with their arrival. Nothing waits for the policy: the robot runs the
   * rows due by each tick, or holds. */
  bool run_real_time (EpisodeResult *result, std::string *error)
  {
    // Live sources: no preroll; the sinks complete PLAYING on their first chunk, so the wait
    // is for the cameras' sources to play (the pipeline has chosen its clock and base time
    // before it sets them).
    const auto start = std::chrono::steady_clock::now ();
    for (GstState cur = GST_STATE_NULL; cur != GST_STATE_PLAYING;) {
      if (gst_element_get_state (cams_[0].get (), &cur, nullptr, 100 * GST_MSECOND) ==
          GST_STATE_CHANGE_FAILURE) {
        *error = "the chain did not start playing";
        tools::pop_error (pipeline_.get (), error);
        return false;
      }
      if (tools::pop_error (pipeline_.get (), error) || timed_out (start, "PLAYING state", error))
        return false;
    }
    GstClock *clock = gst_pipeline_get_clock (GST_PIPELINE (pipeline_.get ()));
    const GstClockTime base = gst_element_get_base_time (pipeline_.get ());
    const GstClockTime t0 = gst_clock_get_time (clock);
    auto take = [&] (int timeout_ms) {
      const Got got = receive_one (timeout_ms, gst_clock_get_time (clock));
      if (got == Got::kChunk)
        result->chunks++;
      return got != Got::kNothing;
    };
    bool ok = true;
    for (uint64_t k = 0; ok && !world_.done (); k++) {
      const GstClockTime due = t0 + k * period_;
      for (GstClockTime now = gst_clock_get_time (clock); now < due;
           now = gst_clock_get_time (clock))
        take ((int)((due - now + GST_MSECOND - 1) / GST_MSECOND));
      while (take (0)) {
      }
      const GstClockTime now = gst_clock_get_time (clock);
      if (now >= due + period_)
        result->late++;
      if (k % o_.execute == 0) {
        // Stamped with the tick's own time (its running time), as a camera stamps its nominal
        // frame times: the frames and the state of one observation then last exactly until the
        // next (their durations), however late the loop ran.
        ok = capture (due - base, error);
      }
      if (ok)
        tick (now);
      if (ok && tools::pop_error (pipeline_.get (), error))
        ok = false;
    }
    gst_object_unref (clock);
    return ok;
  }

  /* One observation at @v: the three cameras' frames and the joint state pushed into the chain
   * (with the expert, its chunk for it set aside first). */
  bool capture (GstClockTime v, std::string *error)
  {
    if (o_.policy == "expert") {
      std::lock_guard<std::mutex> lk (expert_.lock);
      expert_.by_time[v] = expert_chunk (world_, o_.horizon);
    }
    for (size_t i = 0; i < std::size (kFeeds); i++) {
      GstBuffer *buf =
          camera_frame (world_, kFeeds[i].camera, o_.camera_width, o_.camera_height, error);
      if (!buf)
        return false;
      if (!push (cams_[i].get (), buf, v)) {
        *error = std::string ("the chain refused the ") + kFeeds[i].pad + " camera's frame";
        tools::pop_error (pipeline_.get (), error);
        return false;
      }
    }
    const std::vector<float> &q = world_.joints ();
    GstBuffer *sb = gst_buffer_new_memdup (q.data (), q.size () * sizeof (float));
    if (!push (state_.get (), sb, v)) {
      *error = "the chain refused the state";
      tools::pop_error (pipeline_.get (), error);
      return false;
    }
    return true;
  }

  /* The world's control tick at @now (the clock's time): the robot's row then (or a hold), its
   * feedback sent. */
  void tick (GstClockTime now)
  {
    const std::vector<float> &row = rx_->position (now);
    proto::Header h;
    if (rx_->feedback (now, &h)) {
      std::vector<uint8_t> fb;
      proto::encode (h, nullptr, "", fb);
      socket_.send_back (fb);
      feedback_sent_++;
      last_feedback_ = {h.chunk_id, h.step_index};
    }
    const proto::Feedback ex = rx_->executing (now);
    const bool moves = row.size () == 3;
    if (moves)
      world_.step (row.data ());
    else
      world_.hold ();
    trace_.push_back ({world_.joints (), ex.chunk_id, moves && ex.time_ns != proto::kTimeNone});
    tick_rows_.push_back ({ex.chunk_id, ex.row, moves ? row : std::vector<float> ()});
  }

  /* Until the sink has had the observation at @v (*sendable: with a chunk it may send), which
   * then waits at the gate. */
  bool wait_arrival (GstClockTime v, bool *sendable, std::string *error)
  {
    const auto start = std::chrono::steady_clock::now ();
    for (;;) {
      {
        std::unique_lock<std::mutex> lk (arrivals_.lock);
        auto it = arrivals_.sendable.find (v);
        if (it != arrivals_.sendable.end ()) {
          *sendable = it->second;
          return true;
        }
        arrivals_.changed.wait_for (lk, std::chrono::milliseconds (20));
      }
      if (tools::pop_error (pipeline_.get (), error) ||
          timed_out (start, "answer from the policy", error))
        return false;
    }
  }

  void release (GstClockTime v)
  {
    std::lock_guard<std::mutex> lk (arrivals_.lock);
    arrivals_.any_released = true;
    arrivals_.released = v;
    arrivals_.changed.notify_all ();
  }

  bool timed_out (std::chrono::steady_clock::time_point start, const char *what, std::string *error)
  {
    const double waited =
        std::chrono::duration<double> (std::chrono::steady_clock::now () - start).count ();
    if (waited <= o_.timeout_s)
      return false;
    *error = std::string ("no ") + what + " at tick " + std::to_string (world_.ticks ()) +
             " within " + std::to_string (o_.timeout_s) + " s";
    return true;
  }

  /* Lock-step for what the robot reports, before the next observation is captured: the sink
   * has read every FEEDBACK the robot sent (on its control ticks, which the clock's moves
   * wake); the last, unless the sink dropped it, has come upstream as a pi0-executing event (the
   * sink merges a chunk's reports read together, never the newest); and pi0infer has taken or
   * refused every event (real-time chunking guides the next chunk by them). */
  bool settle_feedback (std::string *error)
  {
    if (!policy_ || feedback_sent_ == 0)
      return true;
    const auto start = std::chrono::steady_clock::now ();
    for (;;) {
      const guint64 taken = stat_u64 (sink_.get (), "feedback");
      const guint64 dropped = stat_u64 (sink_.get (), "feedback-dropped");
      bool seen = false;
      uint64_t events = 0;
      {
        std::lock_guard<std::mutex> lk (executing_.lock);
        auto it = executing_.row_by_chunk.find (last_feedback_.first);
        seen = it != executing_.row_by_chunk.end () && it->second == last_feedback_.second;
        events = executing_.count;
      }
      if (taken + dropped >= feedback_sent_ && (seen || dropped > dropped_seen_)) {
        if (stat_u64 (policy_.get (), "rtc-feedback") +
                stat_u64 (policy_.get (), "rtc-feedback-ignored") >=
            events) {
          dropped_seen_ = dropped;
          return true;
        }
      }
      if (tools::pop_error (pipeline_.get (), error) ||
          timed_out (start, "pi0-executing event for the robot's feedback", error))
        return false;
      std::this_thread::sleep_for (std::chrono::microseconds (200));
    }
  }

  /* What receive_one took: nothing (none came in time), a frame, or an action chunk with rows. */
  enum class Got { kNothing, kFrame, kChunk };

  /* One frame from the chain, waited for up to @timeout_ms, given to the robot at @now; ACTION
   * frames are counted in action_frames_. */
  Got receive_one (int timeout_ms, GstClockTime now)
  {
    if (!socket_.receive (timeout_ms, &rx_data_))
      return Got::kNothing;
    rx_->receive (now, rx_data_.data (), rx_data_.size (), rx_got_);
    if (rx_got_.reject || rx_got_.frame.header.kind != proto::Kind::kAction)
      return Got::kFrame;
    action_frames_++;
    return rx_got_.rows.empty () ? Got::kFrame : Got::kChunk;
  }

  /* Receives frames until an action chunk for the observation at @v has been scheduled
   * (*answered true), or the sink has had the observation without a chunk it may send (false). */
  bool wait_chunk (GstClockTime v, GstClockTime now, bool *answered, std::string *error)
  {
    const auto start = std::chrono::steady_clock::now ();
    bool got = false;
    for (;;) {
      if (receive_one (got ? 1 : 50, now) == Got::kChunk)
        got = true;
      // The chunk is here, and the sink's signal for every action frame has been handled.
      if (got && signalled_.load () >= action_frames_) {
        *answered = true;
        return true;
      }
      if (!got) {
        std::lock_guard<std::mutex> lk (arrivals_.lock);
        auto it = arrivals_.sendable.find (v);
        if (it != arrivals_.sendable.end () && !it->second) {
          *answered = false;
          return true;
        }
      }
      if (tools::pop_error (pipeline_.get (), error) ||
          timed_out (start, "action chunk for the observation", error))
        return false;
    }
  }

  /* EOS (the recorder commits the episode on it), then the pipeline stops. */
  void finish (bool ok, std::string *error)
  {
    {
      std::lock_guard<std::mutex> lk (arrivals_.lock);
      arrivals_.opened = true; // a chunk still held goes on (and is too late for the robot)
      arrivals_.changed.notify_all ();
    }
    if (ok) {
      for (auto &c : cams_)
        gst_app_src_end_of_stream (GST_APP_SRC (c.get ()));
      gst_app_src_end_of_stream (GST_APP_SRC (state_.get ()));
      GstBus *bus = gst_element_get_bus (pipeline_.get ());
      const tools::MessagePtr m (
          gst_bus_timed_pop_filtered (bus, (GstClockTime)(o_.timeout_s * GST_SECOND),
                                      (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR)));
      gst_object_unref (bus);
      if (!m)
        *error = "the chain did not finish the episode";
      else if (GST_MESSAGE_TYPE (m.get ()) == GST_MESSAGE_ERROR)
        *error = "finishing the episode: " + tools::message_parts (m.get ()).message;
    }
    gst_element_set_state (pipeline_.get (), GST_STATE_NULL);
  }

  const LoopOptions &o_;
  World world_;
  GstClockTime period_;
  ActionSocket socket_;
  tools::ElementPtr pipeline_;
  ClockPtr clock_;
  std::vector<tools::ObjectPtr<GstElement>> cams_;
  tools::ObjectPtr<GstElement> state_;
  std::unique_ptr<proto::Receiver> rx_;
  ExpertChunks expert_;
  SinkArrivals arrivals_;
  std::atomic<unsigned> signalled_{0}; /* `action` signals of kind action, handled */
  unsigned action_frames_ = 0;         /* ACTION frames the robot received */
  std::vector<uint8_t> rx_data_;       /* receive_one's frame, and what the robot made of it */
  proto::Received rx_got_;
  ExecutingEvents executing_;
  unsigned feedback_sent_ = 0;                  /* FEEDBACK frames the robot sent */
  std::pair<uint64_t, uint32_t> last_feedback_; /* the last one's chunk and row */
  guint64 dropped_seen_ = 0;                    /* the sink's feedback-dropped, last settled */
  tools::ObjectPtr<GstElement> sink_;           /* pi0actionsink */
  tools::ObjectPtr<GstElement> policy_;         /* pi0infer (none with the expert) */
  unsigned observations_ = 0;
  bool playing_ = false;
  std::vector<Traced> trace_;
  std::vector<TickRow> tick_rows_;
};

} // namespace

bool
check_options (const LoopOptions &o, std::string *error)
{
  // (A model's chunk shorter than execute leaves the arm on its last row until the next.)
  if (o.execute == 0 || o.horizon == 0) {
    *error = "--execute and --horizon must be at least 1";
    return false;
  }
  if (o.policy == "expert" && o.execute > o.horizon) {
    *error = "--execute " + std::to_string (o.execute) +
             " is more rows than the expert's chunk has (--horizon " + std::to_string (o.horizon) +
             ")";
    return false;
  }
  if (!o.record.empty () && o.execute != 1) {
    *error = "recording needs execute 1: one frame per control tick";
    return false;
  }
  if (std::fabs (o.scene.control_rate - std::round (o.scene.control_rate)) > 1e-9 ||
      o.scene.control_rate < 1) {
    *error = "the control rate must be a whole number of Hz";
    return false;
  }
  if (o.real_time && o.delay_ns > 0) {
    *error = "--delay-ms is lock-step's: in real time the delay is the chain's own";
    return false;
  }
  if (o.real_time && !o.record.empty ()) {
    *error = "recording is lock-step only: a dataset must not depend on how fast the machine is";
    return false;
  }
  const uint64_t period = (uint64_t)std::llround (1e9 / o.scene.control_rate);
  if (o.sync && o.real_time) {
    *error = "--sync is lock-step's: a robot on the clock that waits is the chain's own choice";
    return false;
  }
  if (!o.sync && o.delay_ns >= o.execute * period) {
    *error = "the delay must be shorter than the rows executed per observation (execute " +
             std::to_string (o.execute) + " x " + std::to_string (period / 1000000) +
             " ms = " + std::to_string (o.execute * period / 1000000) + " ms)";
    return false;
  }
  return true;
}

bool
run_loop (const LoopOptions &o, const std::function<void (const EpisodeResult &)> &on_episode,
          std::string *error)
{
  if (!check_options (o, error))
    return false;
  proto::RobotConfig robot;
  if (!proto::load_robot_config (o.robot_config, &robot, error))
    return false;
  for (unsigned e = 0; e < o.episodes; e++) {
    EpisodeResult r;
    std::string err;
    try {
      Episode ep (o, robot, o.seed + e);
      if (!ep.run (&r, &err)) {
        *error =
            "episode " + std::to_string (e) + " (seed " + std::to_string (o.seed + e) + "): " + err;
        return false;
      }
    } catch (const std::exception &ex) {
      *error = ex.what ();
      return false;
    }
    if (!err.empty ()) {
      *error = "episode " + std::to_string (e) + ": " + err;
      return false;
    }
    on_episode (r);
  }
  return true;
}

} // namespace pi0::tools::sim
