/* tools/pi0-sim, the closed loop through the chain (pi0-sim run, expert, robot), run as a user
 * would: appsrc cameras and state -> pi0viewmux -> (the expert, or cudaprep ! pi0infer) ->
 * pi0actionsink -> UDP -> the robot's receiver -> the world, lock-step on the loop's own clock.
 * Counts only. */
#include <cairo.h>
#include <glib.h>
#include <gtest/gtest.h>

#include "common/pi0cairo.h"
#include "common/pi0json.h"
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

/* One tick of pi0-sim --rows: the row under way and the command (empty: the arm held). */
struct TickRow {
  uint64_t chunk = 0;
  unsigned row = 0;
  std::vector<double> command;
  bool operator== (const TickRow &o) const
  {
    return chunk == o.chunk && row == o.row && command == o.command;
  }
};

/* A --rows file: each episode's seed and ticks, in order. */
std::vector<std::pair<uint64_t, std::vector<TickRow>>>
read_rows (const std::string &path)
{
  std::vector<std::pair<uint64_t, std::vector<TickRow>>> episodes;
  std::ifstream in (path);
  for (std::string l; std::getline (in, l);) {
    std::string err;
    const auto j = pi0::json::parse_strict (l, path, &err);
    EXPECT_TRUE (j) << err;
    if (!j)
      break;
    std::vector<TickRow> ticks;
    for (const auto &t : j->at ("ticks")) {
      TickRow r{t.at ("chunk").get<uint64_t> (), t.at ("row").get<unsigned> (), {}};
      if (!t.at ("command").is_null ())
        r.command = t.at ("command").get<std::vector<double>> ();
      ticks.push_back (r);
    }
    episodes.emplace_back (j->at ("seed").get<uint64_t> (), ticks);
  }
  return episodes;
}

/* Two --rows files of the same lock-step run: the same episodes (scenes @seed on), and at every
 * tick the same chunk, row and command. */
void
expect_same_rows (const std::vector<std::pair<uint64_t, std::vector<TickRow>>> &a,
                  const std::vector<std::pair<uint64_t, std::vector<TickRow>>> &b, uint64_t seed)
{
  ASSERT_EQ (a.size (), b.size ());
  for (size_t e = 0; e < a.size (); e++) {
    EXPECT_EQ (a[e].first, seed + e);
    EXPECT_EQ (b[e].first, seed + e);
    const std::vector<TickRow> &x = a[e].second, &y = b[e].second;
    ASSERT_EQ (x.size (), y.size ()) << "episode " << e;
    for (size_t t = 0; t < x.size (); t++)
      EXPECT_TRUE (x[t] == y[t]) << "episode " << e << " tick " << t << ": chunk " << x[t].chunk
                                 << " row " << x[t].row << " against chunk " << y[t].chunk
                                 << " row " << y[t].row;
  }
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

/* Lock-step with a delay depends on world ticks only (issue 44): the same delayed scenes run
 * twice execute the same command at every tick, with the expert and with a policy guided by the
 * robot's feedback; and each chunk but an episode's first runs from the row under way at its
 * arrival (delay / period). Before, the loop closed the sink's gate only once it waited for the
 * second observation's chunk, and a chain quicker than that let the chunk through whole with
 * the clock at its observation: the rows of ticks already past ran, the arm moved back, and
 * which episodes did so changed from run to run (most, here). A delay over execute - 1 periods
 * (250 ms, execute 3) left the chunk at the gate past the observation's last tick, and the next
 * observation behind it, until --timeout. */
TEST (Pi0Sim, ADelayedRunExecutesTheSameRowsEveryTime)
{
  const TempDir tmp ("pi0-sim-rows");
  const std::string tiny = "builtin:pi0-tiny --prep-size 32 --infer rtc=guided-identity";
  struct Case {
    std::string policy;
    unsigned delay_ms, execute;
  };
  const Case cases[] = {{"expert", 100, 5},
                        {"expert", 300, 5},
                        {"expert", 250, 3},
                        {tiny, 100, 5},
                        {tiny, 300, 5},
                        {tiny, 250, 3},
                        /* the moving task */
                        {"expert --block-speed 0.2 --block-speed-spread 0.5", 300, 5},
                        {tiny + " --block-speed 0.2 --phrasing heldout", 300, 5}};
  for (const Case &c : cases) {
    const std::string args = "run --episodes 3 --seed 100 --width 32 --height 32 --timeout 30" +
                             std::string (" --delay-ms ") + std::to_string (c.delay_ms) +
                             " --execute " + std::to_string (c.execute) + " --policy " + c.policy;
    SCOPED_TRACE (args);
    const std::string a = tmp.path () + "/a.jsonl", b = tmp.path () + "/b.jsonl";
    const Ran first = pi0_sim (args + " --rows " + a), second = pi0_sim (args + " --rows " + b);
    ASSERT_EQ (first.status, 0) << first.out;
    ASSERT_EQ (second.status, 0) << second.out;
    EXPECT_EQ (episode_lines (first.out), episode_lines (second.out));
    const auto ra = read_rows (a), rb = read_rows (b);
    ASSERT_EQ (ra.size (), 3u);
    ASSERT_EQ (rb.size (), 3u);
    expect_same_rows (ra, rb, 100);
    unsigned late_chunks = 0;
    for (size_t e = 0; e < ra.size (); e++) {
      const std::vector<TickRow> &x = ra[e].second;
      for (size_t t = 0; t < x.size (); t++) {
        EXPECT_EQ (x[t].command.size (), 3u) << "episode " << e << " tick " << t;
        if (t > 0 && x[t].chunk != x[t - 1].chunk) {
          late_chunks++;
          EXPECT_EQ (x[t].row, c.delay_ms / 100) << "episode " << e << " tick " << t;
        }
      }
    }
    EXPECT_GT (late_chunks, 0u);
  }
}

/* The synchronous baseline (--sync): before each chunk but the first the arm holds for the
 * delay (whole ticks) while the world goes on, then runs the chunk from its first row; on the
 * moving task, lock-step, the same rows every time. The held ticks count towards the outcome's
 * tick, so the same scenes take longer than without the delay. */
TEST (Pi0Sim, TheSynchronousBaselineHoldsForTheDelayThenRunsTheChunkWhole)
{
  const TempDir tmp ("pi0-sim-sync");
  const std::string args = "run --episodes 3 --seed 100 --width 32 --height 32 --timeout 30"
                           " --block-speed 0.15 --block-speed-spread 0.5 --phrasing train";
  const std::string a = tmp.path () + "/a.jsonl", b = tmp.path () + "/b.jsonl";
  const Ran base = pi0_sim (args);
  const Ran first = pi0_sim (args + " --sync --delay-ms 250 --rows " + a);
  const Ran second = pi0_sim (args + " --sync --delay-ms 250 --rows " + b);
  ASSERT_EQ (base.status, 0) << base.out;
  ASSERT_EQ (first.status, 0) << first.out;
  ASSERT_EQ (second.status, 0) << second.out;
  EXPECT_EQ (episode_lines (first.out), episode_lines (second.out));
  const auto ra = read_rows (a), rb = read_rows (b);
  ASSERT_EQ (ra.size (), 3u);
  ASSERT_EQ (rb.size (), 3u);
  const std::vector<std::string> fast = episode_lines (base.out), slow = episode_lines (first.out);
  ASSERT_EQ (fast.size (), 3u);
  ASSERT_EQ (slow.size (), 3u);
  expect_same_rows (ra, rb, 100);
  unsigned long_episodes = 0;
  for (size_t e = 0; e < ra.size (); e++) {
    SCOPED_TRACE ("episode " + std::to_string (e));
    const std::vector<TickRow> &x = ra[e].second;
    // Chunk 1 runs from tick 0; each later chunk after 3 held ticks (250 ms: rounded up),
    // from its row 0, and its first 5 rows before the next hold.
    unsigned chunks = 0;
    for (size_t t = 0; t < x.size (); t++) {
      if (x[t].command.empty ())
        continue;
      if (t == 0 || x[t].chunk != x[t - 1].chunk) {
        chunks++;
        EXPECT_EQ (x[t].row, 0u) << "tick " << t;
        if (chunks > 1) {
          ASSERT_GE (t, 3u);
          for (size_t h = t - 3; h < t; h++)
            EXPECT_TRUE (x[h].command.empty () && x[h].chunk == 0) << "tick " << h;
          EXPECT_FALSE (x[t - 4].command.empty ()) << "tick " << t - 4;
        }
      }
    }
    EXPECT_EQ (field (slow[e], "outcome"), "\"success\"");
    // Every chunk after the first is a switch, the first from chunk 0 to 1 too.
    EXPECT_EQ (field (slow[e], "switches"), std::to_string (chunks - 1));
    const int fast_ticks = std::stoi (field (fast[e], "ticks"));
    if (fast_ticks <= 5) { // done within the first chunk, which nothing holds
      EXPECT_EQ (chunks, 1u);
      EXPECT_EQ (std::stoi (field (slow[e], "ticks")), fast_ticks);
    } else {
      EXPECT_GT (chunks, 1u);
      EXPECT_GT (std::stoi (field (slow[e], "ticks")), fast_ticks);
      long_episodes++;
    }
  }
  EXPECT_GE (long_episodes, 2u);
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
 * scripts/sim_close_loop.sh on the chain's own recordings, pi0-sim-moving and pi05-sim-moving
 * by scripts/sim_moving_loop.sh, and their untrained controls), loaded
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
  struct Policy {
    std::string name, task;
    unsigned least;
  };
  /* The moving task's policies (issue 44) on their task with a 2-s limit, worded as training
   * never did (pi0 9 of 10 here when committed, pi0.5 10), and on the static task worded so
   * (7 and 9 of 10). */
  const std::string moving = " --block-speed 0.15 --block-speed-spread 0.5 --time-limit 20";
  const Policy policies[] = {{"pi0-sim-tiny", "", 8},
                             {"pi05-sim-tiny", "", 8},
                             {"pi0-sim-moving", moving + " --phrasing heldout", 7},
                             {"pi05-sim-moving", moving + " --phrasing heldout", 7}};
  for (const Policy &p : policies) {
    SCOPED_TRACE (p.name + p.task);
    const std::string model = root + "/models/" + p.name;
    const Ran trained = pi0_sim ("run --policy " + model + args + p.task);
    const Ran again = pi0_sim ("run --policy " + model + args + p.task);
    const Ran control = pi0_sim ("run --policy " + model + "-control" + args + p.task);
    ASSERT_EQ (trained.status, 0) << trained.out;
    ASSERT_EQ (control.status, 0) << control.out;
    ASSERT_EQ (episode_lines (trained.out).size (), 10u) << trained.out;
    EXPECT_EQ (episode_lines (trained.out), episode_lines (again.out));
    EXPECT_GE (count (trained, "success"), p.least) << trained.out;
    EXPECT_LE (count (control, "success"), 3u) << control.out;
    EXPECT_LT (jerk (trained) * 3, jerk (control)) << trained.out << control.out;
    for (const std::string &l : episode_lines (trained.out))
      EXPECT_EQ (field (l, "rejected"), "0") << l;
  }
  for (const std::string name : {"pi0-sim-moving", "pi05-sim-moving"}) {
    const Ran heldout =
        pi0_sim ("run --policy " + root + "/models/" + name + args + " --phrasing heldout");
    ASSERT_EQ (heldout.status, 0) << heldout.out;
    EXPECT_GE (count (heldout, "success"), 6u) << name << "\n" << heldout.out;
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

/* Bad arguments exit with status 2 and say what is wrong, before anything runs (docs/sim.md):
 * the usage, an unknown option or one the command does not take, a value out of range, options
 * that contradict each other, a file an option names that cannot be read. Nothing is recorded
 * and no episode is printed. Before issue 44 the checks made after parsing (a delay as long as
 * the rows executed, a camera size out of range, ...) exited 1, as a failed run does. */
TEST (Pi0Sim, BadArgumentsExitTwoSayingWhatIsWrong)
{
  const TempDir tmp ("pi0-sim-bad");
  const std::string never = tmp.path () + "/never";
  {
    std::ofstream (tmp.path () + "/key") << "k";
  }
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      /* The usage. */
      {"teleport", "usage: pi0-sim snapshot"},
      {"run extra", "usage: pi0-sim snapshot"},
      {"snapshot", "snapshot needs --out DIR"},
      /* Options that are none, or not the command's. */
      {"run --frobnicate 1", "Unknown option --frobnicate"},
      {"expert --delay-ms 100", "--delay-ms is not an option of expert"},
      {"snapshot --out " + never + " --episodes 2", "--episodes is not an option of snapshot"},
      {"run --key k", "--key is not an option of run"},
      {"robot --record " + never, "--record is not an option of robot"},
      /* Values out of range, with their bounds. */
      {"run --width 8", "--width: not a whole number from 16 to 4096: 8"},
      {"robot --height 4097", "--height: not a whole number from 16 to 4096: 4097"},
      {"run --prep-size 0", "--prep-size: not a whole number from 1 to 4096: 0"},
      {"run --episodes 0", "--episodes: not a whole number from 1 to 1000000: 0"},
      {"expert --execute 0", "--execute: not a whole number from 1 to 50: 0"},
      {"run --horizon 51", "--horizon: not a whole number from 1 to 50: 51"},
      {"run --timeout 0", "--timeout: not a whole number from 1 to 3600: 0"},
      {"run --delay-ms -5", "--delay-ms: not a whole number up to 60000: -5"},
      {"run --seed x", "--seed: not a whole number up to 18446744073709551615: x"},
      {"expert --blocks 6", "--blocks: not a whole number from 1 to 5: 6"},
      {"expert --block-size 0.2", "--block-size: metres from 0.02 to 0.15: 0.2"},
      {"expert --actuation-noise -1", "--actuation-noise: radians from 0 to 0.5: -1"},
      /* RTP/JPEG writes a frame's size in 8-pixel blocks: 100 would arrive as 104. */
      {"robot --width 100", "robot: --width and --height must be multiples of 8 up to 2040"},
      {"robot --height 2048", "robot: --width and --height must be multiples of 8 up to 2040"},
      {"robot --rtp-port 65530", "--rtp-port: not a whole number from 1 to 65529: 65530"},
      {"robot --port 0", "--port: not a whole number from 1 to 65535: 0"},
      {"run --record=", "--record: empty"},
      {"robot --key=", "--key: empty: an empty key would turn authentication off"},
      {"expert --block-speed 0.6", "--block-speed: m/s from 0 to 0.5: 0.6"},
      {"run --block-speed-spread 2", "--block-speed-spread: a fraction from 0 to 1: 2"},
      {"snapshot --out " + never + " --phrasing Loud",
       "--phrasing: canonical, train or heldout, not \"Loud\""},
      {"run --time-limit 0", "--time-limit: not a whole number from 1 to 100000: 0"},
      {"robot --sync", "--sync is not an option of robot"},
      {"robot --key-file /nonexistent/pi0-key",
       "--key-file: cannot read the key file /nonexistent/pi0-key"},
      /* Options that contradict each other. */
      {"run --execute 5 --delay-ms 500",
       "the delay must be shorter than the rows executed per observation (execute 5 x 100 ms = "
       "500 ms)"},
      {"expert --execute 20 --horizon 10",
       "--execute 20 is more rows than the expert's chunk has (--horizon 10)"},
      {"run --execute 5 --record " + never,
       "recording needs execute 1: one frame per control tick"},
      {"run --real-time --delay-ms 50", "in real time the delay is the chain's own"},
      {"run --real-time --sync", "--sync is lock-step's"},
      {"run --real-time --execute 1 --record " + never, "recording is lock-step only"},
      {"run --lossless", "--lossless is how --record records the cameras: it needs --record DIR"},
      {"robot --key k --key-file " + tmp.path () + "/key",
       "--key and --key-file are one key: give one of them"},
      /* A file named that cannot be read (the planar configuration pi0_sim() adds comes after:
       * the first is the one refused). */
      {"run --robot-config /nonexistent/robot.json",
       "--robot-config: cannot read robot config /nonexistent/robot.json"},
  };
  for (const Case &c : cases) {
    /* The bad configuration must be the only one given; run and robot would write --rows. */
    const bool own_config = c.args.find ("--robot-config") != std::string::npos;
    const bool rows = c.args.rfind ("run", 0) == 0 || c.args.rfind ("robot", 0) == 0;
    const Ran r = own_config ? run_command (build_root () + "/tools/pi0-sim " + c.args)
                             : pi0_sim (c.args + (rows ? " --rows " + never : ""));
    SCOPED_TRACE ("pi0-sim " + c.args + "\n" + r.out);
    EXPECT_EQ (r.status, 2);
    EXPECT_NE (r.out.find (c.message), std::string::npos);
    EXPECT_EQ (r.out.find ("{\""), std::string::npos) << "nothing ran";
    EXPECT_FALSE (std::filesystem::exists (never)) << "nothing was written";
  }
}

/* What fails once it runs exits 1, with the reason: a policy that does not load, a picture
 * that cannot be written, a scene the blocks do not fit, no policy's end answering. */
TEST (Pi0Sim, RunsThatFailExitOne)
{
  Ran r = pi0_sim ("run --policy /nonexistent/checkpoint --episodes 1 --timeout 30");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("/nonexistent/checkpoint"), std::string::npos) << r.out;
  r = pi0_sim ("snapshot --out /nonexistent/dir");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("/nonexistent/dir/overhead.png"), std::string::npos) << r.out;
  r = pi0_sim ("run --episodes 1 --rows /nonexistent/dir/rows.jsonl");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("--rows: cannot write /nonexistent/dir/rows.jsonl"), std::string::npos)
      << r.out;
  /* Five 10-cm blocks do not fit every scene: a clear error naming the seed, not a hang. */
  r = pi0_sim ("expert --blocks 5 --episodes 1 --seed 42");
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("no scene fits these options (seed 42): try fewer or smaller blocks"),
             std::string::npos)
      << r.out;
  r = pi0_sim ("expert --blocks 5 --block-size 0.08 --episodes 1 --seed 42");
  EXPECT_EQ (r.status, 0) << r.out;
  /* pi0-sim robot with no policy's end answering within --timeout. */
  r = pi0_sim ("robot --episodes 1 --timeout 1 --bind 127.0.0.1 --rtp-port 9 --port " +
               std::to_string (40000 + getpid () % 20000));
  EXPECT_EQ (r.status, 1);
  EXPECT_NE (r.out.find ("no action frame came back within 1 s"), std::string::npos) << r.out;
  /* One block: it is the named one, and the expert touches it. */
  r = pi0_sim ("expert --blocks 1 --episodes 5");
  EXPECT_EQ (r.status, 0) << r.out;
  EXPECT_NE (r.out.find ("{\"episodes\":5,\"success\":5}"), std::string::npos) << r.out;
}
