/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-sim: the simulated world of the closed loop (sim/, docs/sim.md) from the command line.
 *
 *   pi0-sim snapshot --out DIR [--seed S] [--ticks N] [--width W] [--height H] [--robot-config F]
 *       the three cameras' views (DIR/overhead.png, front.png, wrist.png) of scene S after the
 *       expert has moved N ticks, and the scene as one JSON line on stdout
 *   pi0-sim expert [--episodes K] [--seed S] [--execute N] [--horizon H] [--robot-config F]
 *       K episodes (seeds S, S+1, ...) solved by the scripted expert, N rows of each H-row
 *       chunk (10) executed before it plans again: one JSON line per episode, then a summary
 *   pi0-sim run [--policy expert|MODEL] [--infer "PROPS"] [--episodes K] [--seed S]
 *               [--execute N] [--horizon H] [--width W] [--height H] [--prep-size P]
 *               [--record DIR [--lossless]] [--overlay DIR] [--real-time] [--robot-config F]
 *               [--timeout S]
 *       the same episodes through the chain, lock-step (pi0simloop.h; --real-time: on the
 *       clock, the cameras live, nothing waiting for the policy): the cameras and state
 *       into pi0viewmux, the policy (the expert, or pi0infer model=MODEL PROPS), the chunks
 *       to the robot over UDP; --record DIR appends each episode to a LeRobotDataset (--lossless:
 *       the cameras bit-exact)
 *   pi0-sim robot [--policy-host H] [--rtp-port P] [--bind A] [--port N] [--gap-ms G] ...
 *       the robot's end alone, for a policy's end elsewhere (pipelines/sim-policy.txt): the
 *       cameras and the state (with the task) as RTP to H, ports P to P+6; the actions on A:N;
 *       real time (pi0simremote.h)
 */
#include "gst/gstpi0elements.h"
#include "tools/pi0-sim/pi0simloop.h"
#include "tools/pi0-sim/pi0simremote.h"
#include "sim/pi0simrender.h"
#include "sim/pi0simworld.h"

#include <gst/gst.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace
{

/* The command, snapshot's own options, and the loop's (which expert and snapshot read too). */
struct Args {
  std::string command, out;
  unsigned ticks = 0, timeout = 120, delay_ms = 0;
  /* robot: the robot's end across a network */
  std::string policy_host = "127.0.0.1", bind = "0.0.0.0";
  int rtp_port = 5600, port = 9870;
  unsigned gap_ms = 500;
  pi0::sim::LoopOptions loop = [] {
    pi0::sim::LoopOptions o;
    o.episodes = 10;
    return o;
  }();
};

int
usage ()
{
  std::fprintf (
      stderr, "usage: pi0-sim snapshot --out DIR [--seed S] [--ticks N] [--width W] [--height H]"
              " [--robot-config F]\n"
              "       pi0-sim expert [--episodes K] [--seed S] [--execute N] [--horizon H] "
              "[--actuation-noise RAD] [--blocks N] [--block-size M] [--robot-config F]\n"
              "       pi0-sim run [--policy expert|MODEL] [--infer PROPS] [--episodes K] [--seed S]"
              " [--execute N] [--horizon H] [--width W] [--height H] [--prep-size P]"
              " [--delay-ms D] [--record DIR [--lossless]] [--overlay DIR] [--actuation-noise RAD]"
              " [--blocks N] [--block-size M] [--real-time] [--robot-config F] [--timeout S]\n"
              "       pi0-sim robot [--policy-host H] [--rtp-port P] [--bind A] [--port N]"
              " [--episodes K] [--seed S] [--execute N] [--width W] [--height H] [--gap-ms G]"
              " [--actuation-noise RAD] [--blocks N] [--block-size M] [--robot-config F]"
              " [--timeout S]\n");
  return 2;
}

bool
parse_uint (const char *s, unsigned long long max, unsigned long long *out)
{
  char *end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull (s, &end, 10);
  if (errno || !end || *end || s[0] == '-' || s[0] == '\0' || v > max)
    return false;
  *out = v;
  return true;
}

bool
parse (int argc, char **argv, Args *a)
{
  if (argc < 2)
    return false;
  a->command = argv[1];
  for (int i = 2; i < argc; i++) {
    const std::string k = argv[i];
    if (k == "--lossless") {
      a->loop.lossless = true;
      continue;
    }
    if (k == "--real-time") {
      a->loop.real_time = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf (stderr, "pi0-sim: %s needs a value\n", k.c_str ());
      return false;
    }
    const char *v = argv[++i];
    unsigned long long n = 0;
    auto number = [&] (unsigned long long max) {
      if (parse_uint (v, max, &n))
        return true;
      std::fprintf (stderr, "pi0-sim: %s: not a whole number up to %llu: %s\n", k.c_str (), max, v);
      return false;
    };
    if (k == "--out")
      a->out = v;
    else if (k == "--robot-config")
      a->loop.robot_config = v;
    else if (k == "--policy")
      a->loop.policy = v;
    else if (k == "--infer")
      a->loop.infer_properties = v;
    else if (k == "--record")
      a->loop.record = v;
    else if (k == "--overlay")
      a->loop.overlay = v;
    else if (k == "--policy-host")
      a->policy_host = v;
    else if (k == "--bind")
      a->bind = v;
    else if (k == "--actuation-noise") {
      char *end = nullptr;
      const double r = std::strtod (v, &end);
      if (!end || *end || !(r >= 0 && r <= 0.5)) {
        std::fprintf (stderr, "pi0-sim: --actuation-noise: radians from 0 to 0.5: %s\n", v);
        return false;
      }
      a->loop.scene.actuation_noise = r;
    } else if (k == "--block-size") {
      char *end = nullptr;
      const double m = std::strtod (v, &end);
      if (!end || *end || !(m >= 0.02 && m <= 0.15)) {
        std::fprintf (stderr, "pi0-sim: --block-size: metres from 0.02 to 0.15: %s\n", v);
        return false;
      }
      // Touching stays "the tip over the block": the same share of its side as the default's.
      a->loop.scene.touch_radius =
          m * pi0::sim::SceneOptions{}.touch_radius / pi0::sim::SceneOptions{}.block_size;
      a->loop.scene.block_size = m;
    } else if (k == "--seed") {
      if (!number (~0ull))
        return false;
      a->loop.seed = n;
    } else {
      struct {
        const char *name;
        unsigned long long max;
        unsigned *u;
        int *i;
      } const numbers[] = {{"--ticks", 100000, &a->ticks, nullptr},
                           {"--episodes", 1000000, &a->loop.episodes, nullptr},
                           {"--execute", 50, &a->loop.execute, nullptr},
                           {"--horizon", 50, &a->loop.horizon, nullptr},
                           {"--timeout", 3600, &a->timeout, nullptr},
                           {"--delay-ms", 60000, &a->delay_ms, nullptr},
                           {"--gap-ms", 60000, &a->gap_ms, nullptr},
                           {"--rtp-port", 65529, nullptr, &a->rtp_port},
                           {"--port", 65535, nullptr, &a->port},
                           {"--blocks", 5, &a->loop.scene.blocks, nullptr},
                           {"--width", 4096, nullptr, &a->loop.camera_width},
                           {"--height", 4096, nullptr, &a->loop.camera_height},
                           {"--prep-size", 4096, nullptr, &a->loop.prep_size}};
      bool known = false;
      for (const auto &num : numbers)
        if (k == num.name) {
          if (!number (num.max))
            return false;
          if (num.u)
            *num.u = (unsigned)n;
          else
            *num.i = (int)n;
          known = true;
        }
      if (!known) {
        std::fprintf (stderr, "pi0-sim: unknown option %s\n", k.c_str ());
        return false;
      }
    }
  }
  if (a->loop.scene.blocks == 0) {
    std::fprintf (stderr, "pi0-sim: --blocks must be from 1 to 5\n");
    return false;
  }
  if (a->loop.execute == 0 || a->loop.horizon == 0) {
    std::fprintf (stderr, "pi0-sim: --execute and --horizon must be at least 1\n");
    return false;
  }
  return true;
}

/* Prints each episode's line as it ends, and the summary line of all of them. */
struct Summary {
  bool remote = false; /* `robot`: the policy is across the wire */
  unsigned counts[4] = {0, 0, 0, 0}, success_ticks = 0, switches = 0;
  double jerk = 0, switch_sum = 0, switch_max = 0;

  void add (const pi0::sim::EpisodeResult &r)
  {
    counts[(int)r.outcome]++;
    if (r.outcome == pi0::sim::Outcome::Success)
      success_ticks += r.ticks;
    jerk += r.jerk;
    switches += r.switches;
    switch_sum += r.switch_step_sum;
    switch_max = std::max (switch_max, r.switch_step_max);
    std::printf ("{\"seed\":%llu,\"instruction\":\"%s\",\"outcome\":\"%s\",\"ticks\":%u,"
                 "\"chunks\":%u,",
                 (unsigned long long)r.seed, r.instruction.c_str (),
                 pi0::sim::outcome_name (r.outcome), r.ticks, r.chunks);
    /* What pi0infer did is known in-process only: `robot` sees the policy through the wire. */
    if (!remote)
      std::printf ("\"guided\":%u,\"delay_rows\":%u,\"unanswered\":%u,", r.guided, r.delay_rows,
                   r.unanswered);
    std::printf ("\"rows\":%u,\"rejected\":%u,\"jerk\":%.3f,\"switches\":%u,"
                 "\"switch_step_max\":%.5f,\"step_max\":%.5f,\"late\":%u}\n",
                 r.executed, r.rejected, r.jerk, r.switches, r.switch_step_max, r.step_max, r.late);
    std::fflush (stdout);
  }
  void print (unsigned episodes) const
  {
    const unsigned success = counts[(int)pi0::sim::Outcome::Success];
    std::printf ("{\"episodes\":%u,\"success\":%u,\"wrong\":%u,\"timeout\":%u,"
                 "\"mean_ticks_to_success\":%.2f,\"mean_jerk\":%.3f,\"switches\":%u,"
                 "\"mean_switch_step\":%.5f,\"max_switch_step\":%.5f}\n",
                 episodes, success, counts[(int)pi0::sim::Outcome::Wrong],
                 counts[(int)pi0::sim::Outcome::Timeout],
                 success ? (double)success_ticks / success : 0.0, episodes ? jerk / episodes : 0.0,
                 switches, switches ? switch_sum / switches : 0.0, switch_max);
  }
};

std::string
scene_json (const pi0::sim::World &w)
{
  std::string s = "{\"seed\":" + std::to_string (w.seed ()) + ",\"instruction\":\"" +
                  w.instruction () + "\",\"target\":" + std::to_string (w.target ()) +
                  ",\"blocks\":[";
  char buf[160];
  for (size_t i = 0; i < w.blocks ().size (); i++) {
    const pi0::sim::Block &b = w.blocks ()[i];
    std::snprintf (buf, sizeof buf, "%s{\"colour\":\"%s\",\"x\":%.4f,\"y\":%.4f,\"yaw\":%.4f}",
                   i ? "," : "", b.colour.c_str (), b.at.x, b.at.y, b.yaw);
    s += buf;
  }
  s += "],\"joints\":[";
  for (size_t i = 0; i < w.joints ().size (); i++) {
    std::snprintf (buf, sizeof buf, "%s%.4f", i ? "," : "", w.joints ()[i]);
    s += buf;
  }
  return s + "]}";
}

/* GStreamer and the project's elements, for the commands that run a pipeline. */
bool
start_gstreamer (int *argc, char ***argv)
{
  gst_init (argc, argv);
  if (gst_pi0_elements_register (nullptr))
    return true;
  std::fprintf (stderr, "pi0-sim: could not register the gst-pi0 elements\n");
  return false;
}

} // namespace

int
main (int argc, char **argv)
{
  Args a;
  if (!parse (argc, argv, &a))
    return usage ();
  pi0::sim::LoopOptions &o = a.loop;
  o.timeout_s = a.timeout;
  o.delay_ns = (uint64_t)a.delay_ms * 1000000;
  if (o.robot_config.empty ()) {
    const char *root = std::getenv ("PI0_SOURCE_ROOT");
    o.robot_config = std::string (root ? root : ".") + "/pipelines/robot-planar.json";
  }
  pi0::proto::RobotConfig robot;
  std::string err;
  if (!pi0::proto::load_robot_config (o.robot_config, &robot, &err)) {
    std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
    return 1;
  }
  try {
    if (a.command == "snapshot") {
      if (a.out.empty ())
        return usage ();
      pi0::sim::World w (robot, o.seed, o.scene);
      while (w.ticks () < a.ticks)
        for (const std::vector<float> &row : pi0::sim::expert_chunk (w, 1))
          w.step (row.data ());
      for (pi0::sim::Camera c :
           {pi0::sim::Camera::Overhead, pi0::sim::Camera::Front, pi0::sim::Camera::Wrist}) {
        const std::string path = a.out + "/" + pi0::sim::camera_name (c) + ".png";
        if (!pi0::sim::write_png (w, c, o.camera_width, o.camera_height, path, &err)) {
          std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
          return 1;
        }
      }
      std::printf ("%s\n", scene_json (w).c_str ());
      return 0;
    }
    if (a.command == "run") {
      if (!start_gstreamer (&argc, &argv))
        return 1;
      Summary sum;
      const bool ok = pi0::sim::run_loop (
          o, [&] (const pi0::sim::EpisodeResult &r) { sum.add (r); }, &err);
      if (!ok) {
        std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
        return 1;
      }
      sum.print (o.episodes);
      return 0;
    }
    if (a.command == "robot") {
      if (!start_gstreamer (&argc, &argv))
        return 1;
      pi0::sim::RemoteOptions r;
      r.loop = o;
      r.policy_host = a.policy_host;
      r.bind = a.bind;
      r.rtp_port = a.rtp_port;
      r.port = a.port;
      r.gap_s = a.gap_ms / 1000.0;
      Summary sum;
      sum.remote = true;
      if (!pi0::sim::run_remote_robot (
              r, [&] (const pi0::sim::EpisodeResult &e) { sum.add (e); }, &err)) {
        std::fprintf (stderr, "pi0-sim: %s\n", err.c_str ());
        return 1;
      }
      sum.print (o.episodes);
      return 0;
    }
    if (a.command == "expert") {
      unsigned success = 0;
      for (unsigned e = 0; e < o.episodes; e++) {
        pi0::sim::World w (robot, o.seed + e, o.scene);
        while (!w.done ()) {
          const auto chunk = pi0::sim::expert_chunk (w, o.horizon);
          for (unsigned k = 0; k < o.execute && k < chunk.size () && !w.done (); k++)
            w.step (chunk[k].data ());
        }
        success += w.outcome () == pi0::sim::Outcome::Success;
        std::printf ("{\"seed\":%llu,\"instruction\":\"%s\",\"outcome\":\"%s\",\"ticks\":%u}\n",
                     (unsigned long long)w.seed (), w.instruction ().c_str (),
                     pi0::sim::outcome_name (w.outcome ()), w.decided_at ());
      }
      std::printf ("{\"episodes\":%u,\"success\":%u}\n", o.episodes, success);
      return 0;
    }
  } catch (const std::exception &e) {
    std::fprintf (stderr, "pi0-sim: %s\n", e.what ());
    return 1;
  }
  return usage ();
}
