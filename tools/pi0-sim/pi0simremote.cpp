/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "tools/pi0-sim/pi0simremote.h"

#include "tools/pi0-sim/pi0simgst.h"
#include "tools/pi0-sim/pi0simsocket.h"

#include "protocol/pi0frame.h"
#include "protocol/pi0safety.h"
#include "protocol/pi0session.h"
#include "tools/pi0-sim/pi0simmotion.h"
#include "sim/pi0simrender.h"

#include <gst/pi0/pi0.h>

#include <cstdio>
#include <iterator>
#include <memory>

namespace pi0::tools::sim
{

using namespace pi0::sim; /* the world, its cameras, its expert */

namespace
{

/* libjpeg's scale, 1 to 100; the renders' flat colours and edges come through nearly as drawn. */
constexpr int kJpegQuality = 90;

/* Camera kFeeds[i] goes to RTP port rtp-port + 2i (RTCP would take the odd ones), the state to
 * rtp-port + 6. */
class RobotEnd
{
public:
  RobotEnd (const RemoteOptions &o, const proto::RobotConfig &robot)
      : o_ (o), robot_ (robot),
        period_ ((GstClockTime)std::llround (1e9 / o.loop.scene.control_rate))
  {
  }

  bool start (std::string *error)
  {
    if (!socket_.open (o_.bind, o_.port, error))
      return false;
    std::string line;
    const std::string host = " host=" + o_.policy_host + " sync=false async=false";
    // A frame is a JPEG of a few datagrams (RTP/JPEG, RFC 2435): a lost one costs that frame
    // of that view, and the next is whole. rtpjpegpay takes 4:2:0 YCbCr, not an RGB JPEG.
    for (size_t i = 0; i < std::size (kFeeds); i++)
      line += std::string (" appsrc name=cam_") + kFeeds[i].pad +
              " ! videoconvert ! video/x-raw,format=I420 ! jpegenc quality=" +
              std::to_string (kJpegQuality) + " ! rtpjpegpay mtu=1400 pt=26 ! udpsink port=" +
              std::to_string (o_.rtp_port + 2 * (int)i) + host;
    line += " appsrc name=state ! rtpgstpay config-interval=1 pt=96 ! udpsink port=" +
            std::to_string (o_.rtp_port + 6) + host;
    pipeline_ = tools::launch (line, error);
    if (!pipeline_) {
      *error = "the robot's cameras: " + *error;
      return false;
    }
    GstElement *p = pipeline_.get ();
    const int fps = (int)std::lround (o_.loop.scene.control_rate);
    for (const Feed &f : kFeeds) {
      GstElement *src = gst_bin_get_by_name (GST_BIN (p), (std::string ("cam_") + f.pad).c_str ());
      GstCaps *caps =
          gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING, "RGB", "width", G_TYPE_INT,
                               o_.loop.camera_width, "height", G_TYPE_INT, o_.loop.camera_height,
                               "framerate", GST_TYPE_FRACTION, fps, (int)o_.loop.execute, nullptr);
      g_object_set (src, "caps", caps, "format", GST_FORMAT_TIME, "is-live", TRUE, nullptr);
      gst_caps_unref (caps);
      cams_.emplace_back (src);
    }
    GstElement *state = gst_bin_get_by_name (GST_BIN (p), "state");
    GstCaps *caps = gst_caps_new_simple ("application/x-pi0-state", "dim", G_TYPE_INT,
                                         (int)robot_.dim (), nullptr);
    g_object_set (state, "caps", caps, "format", GST_FORMAT_TIME, "is-live", TRUE, nullptr);
    gst_caps_unref (caps);
    state_.reset (state);
    if (gst_element_set_state (p, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE ||
        gst_element_get_state (p, nullptr, nullptr, 5 * GST_SECOND) != GST_STATE_CHANGE_SUCCESS) {
      *error = "the robot's cameras did not start";
      tools::pop_error (pipeline_.get (), error);
      return false;
    }
    clock_.reset (gst_pipeline_get_clock (GST_PIPELINE (p)));
    base_ = gst_element_get_base_time (p);
    return true;
  }

  /* Observations of @seed's first scene, one per `execute` periods, until an action frame comes
   * back: the policy's end is up (its model loaded, its chain playing). Nothing is executed. */
  bool wait_for_policy (uint64_t seed, std::string *error)
  {
    const World w (robot_, seed, o_.loop.scene);
    proto::ReceiverSettings rs;
    rs.robot = robot_;
    rs.key = o_.key; /* frames without a valid HMAC are dropped, as pi0-robotsim drops them */
    proto::Receiver rx (rs);
    const GstClockTime give_up = now () + (GstClockTime)(o_.loop.timeout_s * GST_SECOND);
    for (GstClockTime next = now (), k = 0;; k++) {
      if (now () >= next) {
        if (!capture (w, now () - base_, k % o_.loop.execute == 0, error))
          return false;
        next += period_;
      }
      if (socket_.receive (10, &data_)) {
        rx.receive (now (), data_.data (), data_.size (), got_);
        if (!got_.reject && got_.frame.header.kind == proto::Kind::kAction)
          return true;
      }
      if (tools::pop_error (pipeline_.get (), error))
        return false;
      if (now () >= give_up) {
        char secs[32];
        std::snprintf (secs, sizeof secs, "%g", (double)o_.loop.timeout_s);
        *error = std::string ("no action frame came back within ") + secs +
                 " s: is the policy's end (pipelines/sim-policy.txt) running and sending to port " +
                 std::to_string (o_.port) + "?";
        return false;
      }
    }
  }

  bool episode (uint64_t seed, EpisodeResult *result, std::string *error)
  {
    World world (robot_, seed, o_.loop.scene);
    quiet ();
    episode_start_ = true;
    proto::ReceiverSettings rs;
    rs.robot = robot_;
    rs.key = o_.key; /* frames without a valid HMAC are dropped, as pi0-robotsim drops them */
    proto::Receiver rx (rs);
    std::vector<Traced> trace{{world.joints (), 0, false}};
    const GstClockTime t0 = now ();
    for (uint64_t k = 0; !world.done (); k++) {
      const GstClockTime due = t0 + k * period_;
      for (GstClockTime t = now (); t < due; t = now ())
        take (rx, (int)((due - t + GST_MSECOND - 1) / GST_MSECOND), result);
      while (take (rx, 0, result)) {
      }
      const GstClockTime t = now ();
      if (t >= due + period_)
        result->late++;
      // The state every tick, the cameras every `execute` ticks, stamped with the tick's own
      // running time, as a camera stamps its nominal frame times.
      if (!capture (world, due - base_, k % o_.loop.execute == 0, error))
        return false;
      const std::vector<float> &row = rx.position (t);
      proto::Header h;
      if (rx.feedback (t, &h)) {
        std::vector<uint8_t> fb;
        proto::encode (h, nullptr, o_.key, fb); /* signed as the actions are */
        socket_.send_back (fb);
      }
      const proto::Feedback ex = rx.executing (t);
      // Until a chunk of this episode has come, a HOLD's position is the last episode's: hold.
      const bool moves = result->chunks > 0 && row.size () == robot_.dim ();
      if (moves)
        world.step (row.data ());
      else
        world.hold ();
      trace.push_back ({world.joints (), ex.chunk_id, moves && ex.time_ns != proto::kTimeNone});
      result->tick_rows.push_back ({ex.chunk_id, ex.row, moves ? row : std::vector<float> ()});
      if (tools::pop_error (pipeline_.get (), error))
        return false;
    }
    measure_motion (trace, period_ / 1e9, result);
    result->seed = world.seed ();
    result->instruction = world.instruction ();
    result->outcome = world.outcome ();
    result->ticks = world.decided_at ();
    result->rejected = (unsigned)rx.counters ().rejected;
    result->executed = (unsigned)rx.counters ().executed;
    return true;
  }

private:
  GstClockTime now () const { return gst_clock_get_time (clock_.get ()); }

  /* One frame, waited for up to @timeout_ms, given to @rx; counts the action chunks. */
  bool take (proto::Receiver &rx, int timeout_ms, EpisodeResult *result)
  {
    if (!socket_.receive (timeout_ms, &data_))
      return false;
    rx.receive (now (), data_.data (), data_.size (), got_);
    if (!got_.reject && got_.frame.header.kind == proto::Kind::kAction && !got_.rows.empty ())
      result->chunks++;
    return true;
  }

  /* Between episodes: nothing sent, everything received discarded, for gap_s and until no
   * action frame has come for a fifth of it (bounded by timeout_s: a sender that never pauses
   * is not waited for forever). */
  void quiet ()
  {
    const GstClockTime gap = (GstClockTime)(o_.gap_s * GST_SECOND), start = now ();
    const GstClockTime give_up = start + (GstClockTime)(o_.loop.timeout_s * GST_SECOND);
    GstClockTime last_action = start;
    proto::Header h;
    size_t size = 0;
    while (now () < give_up && (now () < start + gap || now () < last_action + gap / 5)) {
      if (socket_.receive (10, &data_) &&
          proto::peek_header (data_.data (), data_.size (), proto::Limits{}, &h, &size) ==
              proto::Error::kOk &&
          h.kind == proto::Kind::kAction)
        last_action = now ();
    }
  }

  /* The joint state at running time @v, lasting a control period, after the task (a
   * pi0-instruction event); with @cameras, the three cameras' frames then too, lasting until the
   * next observation. The state goes first: the policy's end stamps what it receives on arrival,
   * and pairs an observation with the latest state at or before it. */
  bool capture (const World &w, GstClockTime v, bool cameras, std::string *error)
  {
    // An episode starts: the arm was set up anew, so nothing the last episode commanded bounds
    // a step of this one (pi0actionsink), and no chunk of it guides the next (pi0infer).
    if (episode_start_) {
      gst_element_send_event (state_.get (), gst_pi0_episode_event_new (GST_PI0_EPISODE_START,
                                                                        w.instruction ().c_str ()));
      episode_start_ = false;
    }
    // Before every sample, not once per episode: an RTP packet may be lost, and the policy's
    // end then takes the task from the next one (pi0infer tokenizes only a change).
    gst_element_send_event (state_.get (),
                            gst_pi0_instruction_event_new (w.instruction ().c_str ()));
    const std::vector<float> &q = w.joints ();
    if (!push_timed (state_.get (), gst_buffer_new_memdup (q.data (), q.size () * sizeof (float)),
                     v, period_)) {
      *error = "the state sample was refused";
      return false;
    }
    if (!cameras)
      return true;
    for (size_t i = 0; i < std::size (kFeeds); i++) {
      GstBuffer *buf =
          camera_frame (w, kFeeds[i].camera, o_.loop.camera_width, o_.loop.camera_height, error);
      if (!buf)
        return false;
      if (!push_timed (cams_[i].get (), buf, v, o_.loop.execute * period_)) {
        *error = std::string ("the ") + kFeeds[i].pad + " camera's frame was refused";
        return false;
      }
    }
    return true;
  }

  const RemoteOptions &o_;
  const proto::RobotConfig robot_;
  const GstClockTime period_;
  ActionSocket socket_;
  /* Declared before the other GStreamer members, so released after them (set to NULL then). */
  tools::ElementPtr pipeline_;
  std::vector<tools::ObjectPtr<GstElement>> cams_;
  tools::ObjectPtr<GstElement> state_;
  tools::ObjectPtr<GstClock> clock_;
  GstClockTime base_ = 0;
  std::vector<uint8_t> data_;
  proto::Received got_;
  bool episode_start_ = false; /* the next state sample is an episode's first */
};

} // namespace

bool
run_remote_robot (const RemoteOptions &o,
                  const std::function<void (const EpisodeResult &)> &on_episode, std::string *error)
{
  proto::RobotConfig robot;
  if (!proto::load_robot_config (o.loop.robot_config, &robot, error))
    return false;
  if (o.loop.execute == 0) {
    *error = "execute must be at least 1";
    return false;
  }
  if (!remote_camera_size_ok (o.loop.camera_width) ||
      !remote_camera_size_ok (o.loop.camera_height)) {
    *error = "the cameras' width and height must be multiples of 8 up to 2040 (RTP/JPEG carries "
             "a frame's size in 8-pixel blocks)";
    return false;
  }
  if (o.rtp_port < 1 || o.rtp_port + 6 > 65535 || o.port < 1 || o.port > 65535) {
    *error = "the ports must be 1 to 65535 (the RTP ports are rtp-port to rtp-port + 6)";
    return false;
  }
  try {
    RobotEnd end (o, robot);
    if (!end.start (error) || !end.wait_for_policy (o.loop.seed, error))
      return false;
    for (unsigned e = 0; e < o.loop.episodes; e++) {
      EpisodeResult r;
      if (!end.episode (o.loop.seed + e, &r, error)) {
        *error = "episode " + std::to_string (e) + " (seed " + std::to_string (o.loop.seed + e) +
                 "): " + *error;
        return false;
      }
      on_episode (r);
    }
  } catch (const std::exception &ex) {
    *error = ex.what ();
    return false;
  }
  return true;
}

} // namespace pi0::tools::sim
