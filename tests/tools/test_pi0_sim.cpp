/* tools/pi0-sim, the closed loop through the chain (pi0-sim run, expert, robot), run as a user
 * would: appsrc cameras and state -> pi0viewmux -> (the expert, or cudaprep ! pi0infer) ->
 * pi0actionsink -> UDP -> the robot's receiver -> the world, lock-step on the loop's own clock.
 * Counts only. */
#include <cairo.h>
#include <glib.h>
#include <gtest/gtest.h>

#include "common/pi0cairo.h"
#include "sim/pi0simrender.h"
#include "sim/pi0simworld.h"
#include "tests/pi0testenv.h"
#include "tests/pi0testrun.h"
#include "tests/pi0testsim.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

using namespace pi0::sim;
using pi0test::build_root;
using pi0test::pixels;
using pi0test::planar_robot;
using pi0test::source_root;
using pi0test::TempDir;
using pi0test::venv_python;

namespace
{

using pi0test::run_command;
using Ran = pi0test::CommandResult;

/* pi0-sim with @args, the planar robot's configuration given. */
Ran
pi0_sim (const std::string &args)
{
  return run_command (build_root () + "/tools/pi0-sim " + args + " --robot-config " +
                      source_root () + "/pipelines/robot-planar.json");
}

/* The episode lines of pi0-sim's output ({"seed":...}), in order. */
std::vector<std::string>
episode_lines (const std::string &out)
{
  std::vector<std::string> lines;
  std::istringstream in (out);
  for (std::string l; std::getline (in, l);)
    if (l.rfind ("{\"seed\":", 0) == 0)
      lines.push_back (l);
  return lines;
}

/* One field of an episode line, as its text. */
std::string
field (const std::string &line, const std::string &key)
{
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find (k);
  if (at == std::string::npos)
    return "";
  size_t end = line.find_first_of (",}", at + k.size ());
  return line.substr (at + k.size (), end - at - k.size ());
}

} // namespace

/* The closed loop through the chain (tools/pi0-sim run): appsrc cameras and state ->
 * pi0viewmux -> (the expert, or cudaprep ! pi0infer) -> pi0actionsink -> UDP -> the robot's
 * receiver -> the world, lock-step on the loop's own clock. Counts only. */

TEST (Pi0Sim, TheExpertThroughTheChainDoesWhatItDoesAlone)
{
  const Ran alone = pi0_sim ("expert --episodes 6 --seed 100");
  ASSERT_EQ (alone.status, 0) << alone.out;
  const Ran chain = pi0_sim ("run --episodes 6 --seed 100 --width 64 --height 64");
  ASSERT_EQ (chain.status, 0) << chain.out;
  const std::vector<std::string> a = episode_lines (alone.out), c = episode_lines (chain.out);
  ASSERT_EQ (a.size (), 6u) << alone.out;
  ASSERT_EQ (c.size (), 6u) << chain.out;
  for (size_t i = 0; i < 6; i++) {
    EXPECT_EQ (field (c[i], "outcome"), "\"success\"") << c[i];
    EXPECT_EQ (field (c[i], "ticks"), field (a[i], "ticks")) << c[i] << " against " << a[i];
    EXPECT_EQ (field (c[i], "instruction"), field (a[i], "instruction"));
    EXPECT_EQ (field (c[i], "rejected"), "0") << c[i];
  }
  EXPECT_NE (chain.out.find ("\"success\":6,"), std::string::npos) << chain.out;
}

/* The control: the same architecture with random weights, in the same loop. It is what it is
 * (seeded, lock-step: the same twice), and it is not the expert. */
TEST (Pi0Sim, ARandomPolicyIsTheControl)
{
  const std::string args = "run --policy builtin:pi0-tiny --prep-size 32 --episodes 6 --seed 100"
                           " --width 64 --height 64";
  const Ran first = pi0_sim (args), second = pi0_sim (args);
  ASSERT_EQ (first.status, 0) << first.out;
  ASSERT_EQ (second.status, 0) << second.out;
  const std::vector<std::string> a = episode_lines (first.out), b = episode_lines (second.out);
  ASSERT_EQ (a.size (), 6u) << first.out;
  EXPECT_EQ (a, b); // lock-step: load cannot change an episode
  unsigned success = 0;
  for (const std::string &l : a) {
    success += field (l, "outcome") == "\"success\"";
    EXPECT_GE (std::stoi (field (l, "chunks")), 1) << l;
  }
  EXPECT_LE (success, 3u) << first.out;
}

TEST (Pi0Sim, RecordedEpisodesLoadInLeRobotWithTheCommandsAsActions)
{
  const std::string root = source_root ();
  REQUIRE_LEROBOT_PYTHON (py, "load the recording with the real LeRobot");
  const TempDir tmp ("pi0-sim-rec");
  const std::string &dir = tmp.path ();
  const Ran rec = pi0_sim (
      "run --episodes 3 --seed 40 --execute 1 --width 64 --height 48 --lossless --record " + dir +
      "/ds");
  ASSERT_EQ (rec.status, 0) << rec.out;
  {
    std::ofstream f (dir + "/episodes.jsonl");
    for (const std::string &l : episode_lines (rec.out))
      f << l << "\n";
  }
  const Ran check = run_command (py + " " + root + "/tests/lerobot/check_sim_dataset.py " + dir +
                                 "/ds " + dir + "/episodes.jsonl 64 48");
  EXPECT_EQ (check.status, 0) << check.out;
  EXPECT_NE (check.out.find ("\"episodes\": 3"), std::string::npos) << check.out;
}

/* A policy whose every chunk is NaN: the sink sends none of them, the loop does not wait for
 * chunks that will not come, and the arm never moves (no row reaches the robot). */
TEST (Pi0Sim, APolicyOfNaNsNeverMovesTheArm)
{
  const std::string root = source_root ();
  const TempDir tmp ("pi0-sim-nan");
  const std::string &dir = tmp.path ();
  const Ran made = run_command (venv_python () + " " + root + "/tests/scripted_policies.py " + dir);
  ASSERT_EQ (made.status, 0) << made.out;
  const Ran r = pi0_sim ("run --policy " + dir + "/nan.pt --infer tokenizer=" + root +
                         "/tests/data/tokenizer/tiny_paligemma.model --prep-size 32 --episodes 2"
                         " --width 32 --height 32 --timeout 60");
  ASSERT_EQ (r.status, 0) << r.out;
  const std::vector<std::string> lines = episode_lines (r.out);
  ASSERT_EQ (lines.size (), 2u) << r.out;
  for (const std::string &l : lines) {
    EXPECT_EQ (field (l, "outcome"), "\"timeout\"") << l;
    EXPECT_EQ (field (l, "chunks"), "0") << l;
    EXPECT_EQ (field (l, "rows"), "0") << l;
    EXPECT_EQ (field (l, "unanswered"), "12") << l; // 60 ticks, an observation every 5
  }
}

/* A delay holds each chunk (after the first) at the sink while the robot runs on: the rows
 * already due when it arrives are not executed, and pi0infer's real-time chunking measures the
 * delay from the robot's feedback, in lock-step (the same twice). */
TEST (Pi0Sim, ADelayedChunkArrivesLateAndGuidanceMeasuresTheDelay)
{
  const std::string args = "run --policy builtin:pi0-tiny --prep-size 32 --width 64 --height 64"
                           " --episodes 1 --seed 101 --infer rtc=guided-identity";
  const Ran none = pi0_sim (args), late = pi0_sim (args + " --delay-ms 250"),
            again = pi0_sim (args + " --delay-ms 250");
  ASSERT_EQ (none.status, 0) << none.out;
  ASSERT_EQ (late.status, 0) << late.out;
  ASSERT_EQ (again.status, 0) << again.out;
  const std::vector<std::string> n = episode_lines (none.out), l = episode_lines (late.out),
                                 g = episode_lines (again.out);
  ASSERT_EQ (n.size (), 1u) << none.out;
  ASSERT_EQ (l.size (), 1u) << late.out;
  EXPECT_EQ (l, g);                                           // lock-step
  ASSERT_EQ (field (n[0], "outcome"), "\"timeout\"") << n[0]; // this scene: every chunk runs
  ASSERT_EQ (field (l[0], "outcome"), "\"timeout\"") << l[0];
  EXPECT_EQ (field (n[0], "delay_rows"), "0") << n[0];
  // At 250 ms rows 0 and 1 (due at 0 and 100 ms) are over; row 2 (200 to 300 ms) is under way,
  // and the sink sends the chunk from it on.
  EXPECT_EQ (field (l[0], "delay_rows"), "2") << l[0];
  EXPECT_GT (std::stoi (field (l[0], "guided")), 0) << l[0];
  // Each chunk but the first reaches the robot without its first 2 of 10 rows.
  const int chunks = std::stoi (field (l[0], "chunks"));
  EXPECT_EQ (std::stoi (field (l[0], "rows")), std::stoi (field (n[0], "rows")) - 2 * (chunks - 1))
      << n[0] << "\n"
      << l[0];
}

/* --overlay: the overhead view with pi0overlay's drawing of the chunk made from it, one PNG per
 * observation, and the episode exactly what it is without (the branch only watches). Each
 * frame waits for its own chunk (wait-actions), so two runs make the same pictures byte for
 * byte whichever thread is first (a run in CI once drew frame 0 before its chunk, once after).
 * Every frame is drawn on, and is otherwise the camera's own view. */
TEST (Pi0Sim, TheOverlayDrawsThePlanAndChangesNoEpisode)
{
  /* 192 pixels: at 96 the plan's thin line is a handful of pixels once the tool is near. */
  const std::string args = "run --episodes 1 --seed 5003 --width 192 --height 192 --execute 1";
  const Ran plain = pi0_sim (args);
  ASSERT_EQ (plain.status, 0) << plain.out;
  const TempDir tmp ("pi0-sim-overlay");
  const std::string dir = tmp.path () + "/png", dir2 = tmp.path () + "/again";
  const Ran drawn = pi0_sim (args + " --overlay " + dir);
  ASSERT_EQ (drawn.status, 0) << drawn.out;
  const Ran again = pi0_sim (args + " --overlay " + dir2);
  ASSERT_EQ (again.status, 0) << again.out;
  EXPECT_EQ (episode_lines (drawn.out), episode_lines (plain.out));
  const std::vector<std::string> lines = episode_lines (plain.out);
  ASSERT_EQ (lines.size (), 1u);
  const unsigned ticks = (unsigned)std::stoul (field (lines[0], "ticks"));
  auto slurp = [] (const std::string &path) {
    std::ifstream in (path, std::ios::binary);
    return std::string (std::istreambuf_iterator<char> (in), {});
  };
  unsigned pngs = 0;
  for (auto &e : std::filesystem::directory_iterator (dir)) {
    if (e.path ().extension () != ".png")
      continue;
    pngs++;
    EXPECT_EQ (slurp (e.path ().string ()), slurp (dir2 + "/" + e.path ().filename ().string ()))
        << e.path ().filename () << " differs between two runs";
  }
  EXPECT_EQ (pngs, ticks) << "one per observation";
  /* The plan's line is yellow, which nothing in the scene is. */
  auto yellow = [] (const std::string &png, std::vector<uint8_t> *rgb) {
    const pi0::CairoSurfacePtr surface (cairo_image_surface_create_from_png (png.c_str ()));
    cairo_surface_t *s = surface.get ();
    EXPECT_EQ (cairo_surface_status (s), CAIRO_STATUS_SUCCESS) << png;
    cairo_surface_flush (s);
    const int w = cairo_image_surface_get_width (s), h = cairo_image_surface_get_height (s);
    const int stride = cairo_image_surface_get_stride (s);
    const uint8_t *d = cairo_image_surface_get_data (s);
    unsigned n = 0;
    rgb->clear ();
    for (int y = 0; d && y < h; y++)
      for (int x = 0; x < w; x++) {
        const uint8_t *p = d + y * stride + 4 * x; /* B, G, R, A */
        rgb->insert (rgb->end (), {p[2], p[1], p[0]});
        n += p[2] > 200 && p[1] > 170 && p[0] < 90;
      }
    return n;
  };
  std::vector<uint8_t> f0, f4;
  EXPECT_GT (yellow (dir + "/5003-000.png", &f0), 20u) << "frame 0 shows the plan made from it";
  EXPECT_GT (yellow (dir + "/5003-004.png", &f4), 10u);
  /* Under the drawing, frame 0 is the camera's own view (RGB to BGRx and back reorders). */
  const std::vector<uint8_t> cam =
      pixels (World (planar_robot (), 5003), Camera::Overhead, 192, 192);
  ASSERT_EQ (f0.size (), cam.size ());
  size_t same = 0;
  for (size_t i = 0; i < cam.size (); i += 3)
    same += f0[i] == cam[i] && f0[i + 1] == cam[i + 1] && f0[i + 2] == cam[i + 2];
  EXPECT_GT (same, cam.size () / 3 * 8 / 10) << "most pixels are the camera's";
  EXPECT_LT (same, cam.size () / 3) << "and some are the plan's";
}

/* The committed LeRobot checkpoints (models/pi0-sim-tiny and pi05-sim-tiny, trained by
 * scripts/sim_close_loop.sh on the chain's own recordings, and their untrained controls), loaded
 * by pi0infer with LeRobot's processor files, on ten held-out scenes through the whole chain,
 * lock-step. The trained policies touch the named block in most of them, the controls in few;
 * the trained ones move with a fraction of the controls' jerk and the robot refuses none of their
 * frames. Counts and world-time measures only: the same on any machine (each trained run is made
 * twice to show it). */
TEST (Pi0Sim, TheCommittedPoliciesSolveMostScenesTheirControlsFew)
{
  const std::string root = source_root ();
  const std::string args = " --prep-size 96 --width 96 --height 96 --episodes 10 --seed 5000";
  auto count = [] (const Ran &r, const char *outcome) {
    unsigned n = 0;
    for (const std::string &l : episode_lines (r.out))
      n += field (l, "outcome") == std::string ("\"") + outcome + "\"";
    return n;
  };
  auto jerk = [] (const Ran &r) {
    const size_t at = r.out.rfind ("{\"episodes\"");
    return at == std::string::npos ? 0.0 : std::stod (field (r.out.substr (at), "mean_jerk"));
  };
  for (const std::string name : {"pi0-sim-tiny", "pi05-sim-tiny"}) {
    SCOPED_TRACE (name);
    const std::string model = root + "/models/" + name;
    const Ran trained = pi0_sim ("run --policy " + model + args);
    const Ran again = pi0_sim ("run --policy " + model + args);
    const Ran control = pi0_sim ("run --policy " + model + "-control" + args);
    ASSERT_EQ (trained.status, 0) << trained.out;
    ASSERT_EQ (control.status, 0) << control.out;
    ASSERT_EQ (episode_lines (trained.out).size (), 10u) << trained.out;
    EXPECT_EQ (episode_lines (trained.out), episode_lines (again.out));
    EXPECT_GE (count (trained, "success"), 8u) << trained.out;
    EXPECT_LE (count (control, "success"), 3u) << control.out;
    EXPECT_LT (jerk (trained) * 3, jerk (control)) << trained.out << control.out;
    for (const std::string &l : episode_lines (trained.out))
      EXPECT_EQ (field (l, "rejected"), "0") << l;
  }
}

/* --real-time: the world ticks on the clock and the cameras are live; nothing waits for the
 * policy. What load can change (the outcome, when chunks come, late ticks) is not counted here:
 * each episode ends within the world's time limit, chunks reached the robot and it ran their
 * rows, through pi0infer and with the expert. docs/perf.md has what a real-time run measured. */
TEST (Pi0Sim, RealTimeRunsTheChainOnTheClock)
{
  const std::string root = source_root ();
  for (const std::string &policy : {std::string ("expert"), root + "/models/pi0-sim-tiny"}) {
    SCOPED_TRACE (policy);
    const Ran r = pi0_sim ("run --real-time --episodes 2 --seed 5000 --width 96 --height 96"
                           " --prep-size 96 --execute 5 --policy " +
                           policy);
    ASSERT_EQ (r.status, 0) << r.out;
    const std::vector<std::string> lines = episode_lines (r.out);
    ASSERT_EQ (lines.size (), 2u) << r.out;
    for (const std::string &l : lines) {
      EXPECT_NE (field (l, "outcome"), "\"running\"") << l;
      EXPECT_LE (std::stoi (field (l, "ticks")), 60) << l;
      EXPECT_GE (std::stoi (field (l, "chunks")), 1) << l;
      EXPECT_GT (std::stoi (field (l, "rows")), 0) << l;
    }
  }
}

/* scripts/train_sim_pi0.py refuses, before any training, what it cannot train on or start
 * from: a directory that is not a LeRobotDataset (the glob docs/sim.md once gave took
 * record_sim.sh's logs too) and an --init without a checkpoint, each naming the path. */
TEST (Pi0Sim, TheTrainingScriptRefusesWhatIsNotADatasetOrACheckpoint)
{
  const std::string root = source_root ();
  REQUIRE_LEROBOT_PYTHON (py, "run the training script with the real LeRobot");
  const TempDir tmp ("pi0-sim-train");
  const std::string &dir = tmp.path ();
  const std::string script = py + " " + root + "/scripts/train_sim_pi0.py ";
  {
    std::ofstream (dir + "/shard-000.log") << "{}\n";
  }
  Ran r = run_command (script + dir + "/shard-000.log " + dir + "/out 2>&1");
  EXPECT_NE (r.status, 0);
  EXPECT_NE (r.out.find (dir + "/shard-000.log: not a LeRobotDataset"), std::string::npos) << r.out;
  /* A real dataset (recorded here, two episodes), and --init naming a directory without
   * weights. */
  const Ran rec = pi0_sim ("run --episodes 2 --seed 40 --execute 1 --width 32 --height 32 "
                           "--lossless --record " +
                           dir + "/ds");
  ASSERT_EQ (rec.status, 0) << rec.out;
  r = run_command (script + dir + "/ds " + dir + "/out --init " + dir + "/nothing 2>&1");
  EXPECT_NE (r.status, 0);
  EXPECT_NE (r.out.find ("--init " + dir + "/nothing: no model.safetensors there"),
             std::string::npos)
      << r.out;
  EXPECT_FALSE (std::filesystem::exists (dir + "/out")) << "nothing saved";
}

TEST (Pi0Sim, BadArgumentsAreClearErrors)
{
  Ran r = pi0_sim ("run --execute 5 --record /tmp/pi0-sim-never");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("recording needs execute 1"), std::string::npos) << r.out;
  r = pi0_sim ("run --policy /nonexistent/checkpoint --episodes 1 --timeout 30");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("/nonexistent/checkpoint"), std::string::npos) << r.out;
  r = pi0_sim ("run --execute 20 --horizon 10");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("execute must be 1 to the horizon"), std::string::npos) << r.out;
  r = pi0_sim ("run --frobnicate 1");
  EXPECT_EQ (r.status, 2);
  EXPECT_NE (r.out.find ("Unknown option --frobnicate"), std::string::npos) << r.out;
  r = pi0_sim ("run --execute 5 --delay-ms 500"); // 5 rows at 10 Hz: the next chunk is due
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("the delay must be shorter"), std::string::npos) << r.out;
  r = pi0_sim ("run --real-time --execute 5 --delay-ms 50");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("in real time the delay is the chain's own"), std::string::npos) << r.out;
  r = pi0_sim ("run --real-time --execute 1 --record /tmp/pi0-sim-never");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("recording is lock-step only"), std::string::npos) << r.out;
  r = pi0_sim ("expert --actuation-noise -1");
  EXPECT_EQ (r.status, 2);
  EXPECT_NE (r.out.find ("--actuation-noise: radians"), std::string::npos) << r.out;
  r = pi0_sim ("snapshot --out /nonexistent/dir");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("/nonexistent/dir/overhead.png"), std::string::npos) << r.out;
  for (const char *b : {"0", "6"}) {
    r = pi0_sim (std::string ("expert --blocks ") + b);
    EXPECT_EQ (r.status, 2) << b;
    EXPECT_NE (r.out.find ("--blocks"), std::string::npos) << r.out;
  }
  for (const char *m : {"0.01", "0.2", "big"}) {
    r = pi0_sim (std::string ("expert --block-size ") + m);
    EXPECT_EQ (r.status, 2) << m;
    EXPECT_NE (r.out.find ("--block-size: metres from 0.02 to 0.15"), std::string::npos) << r.out;
  }
  /* Five 10-cm blocks do not fit every scene: a clear error naming the seed, not a hang. */
  r = pi0_sim ("expert --blocks 5 --episodes 1 --seed 42");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("no scene fits these options (seed 42): try fewer or smaller blocks"),
             std::string::npos)
      << r.out;
  r = pi0_sim ("expert --blocks 5 --block-size 0.08 --episodes 1 --seed 42");
  EXPECT_EQ (r.status, 0) << r.out;
  /* pi0-sim robot: ports out of range, and no policy's end answering within --timeout. */
  r = pi0_sim ("robot --rtp-port 65530");
  EXPECT_EQ (r.status, 2);
  /* An empty key would turn authentication off without a word; a key file must be readable. */
  r = pi0_sim ("robot --key=");
  EXPECT_EQ (r.status, 2);
  EXPECT_NE (r.out.find ("--key: empty: an empty key would turn authentication off"),
             std::string::npos)
      << r.out;
  r = pi0_sim ("robot --key-file /nonexistent/pi0-key");
  EXPECT_EQ (r.status, 2);
  EXPECT_NE (r.out.find ("--key-file: cannot read the key file /nonexistent/pi0-key"),
             std::string::npos)
      << r.out;
  r = pi0_sim ("robot --episodes 1 --timeout 1 --bind 127.0.0.1 --rtp-port 9 --port " +
               std::to_string (40000 + getpid () % 20000));
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("no action frame came back within 1 s"), std::string::npos) << r.out;
  /* One block: it is the named one, and the expert touches it. */
  r = pi0_sim ("expert --blocks 1 --episodes 5");
  EXPECT_EQ (r.status, 0) << r.out;
  EXPECT_NE (r.out.find ("{\"episodes\":5,\"success\":5}"), std::string::npos) << r.out;
}
