/* The simulated world of the closed loop (sim/): its random stream, scenes, kinematics, the
 * judge of an episode, the scripted expert, and the three cameras. Counts and pixels only,
 * never times: the world advances one tick per command. */
#include <cairo.h>
#include <glib.h>
#include <gtest/gtest.h>

#include "sim/pi0simrender.h"
#include "sim/pi0simworld.h"
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
using pi0test::pixels;
using pi0test::planar_robot;

namespace
{

double
dist (Vec2 a, Vec2 b)
{
  return std::hypot (a.x - b.x, a.y - b.y);
}

/* Runs one episode, the arm commanded by @policy (which gives a chunk from the world), the
 * first @execute rows of each chunk executed before the next is asked for (open-loop steps, as
 * the chain's robot runs a chunk). */
template <typename Policy>
Outcome
run_episode (World &w, Policy policy, unsigned execute = 5)
{
  while (!w.done ()) {
    const std::vector<std::vector<float>> chunk = policy (w);
    for (unsigned k = 0; k < execute && k < chunk.size () && !w.done (); k++)
      w.step (chunk[k].data ());
  }
  return w.outcome ();
}

/* Pixels within 30 levels of @rgb on every channel. */
size_t
count_colour (const std::vector<uint8_t> &px, std::array<uint8_t, 3> rgb)
{
  size_t n = 0;
  for (size_t i = 0; i + 2 < px.size (); i += 3)
    if (std::abs (px[i] - rgb[0]) < 30 && std::abs (px[i + 1] - rgb[1]) < 30 &&
        std::abs (px[i + 2] - rgb[2]) < 30)
      n++;
  return n;
}

} // namespace

TEST (SimRng, IsSplitmix64)
{
  // splitmix64's published first outputs for seed 0.
  Rng r (0);
  EXPECT_EQ (r.next (), 0xE220A8397B1DCDAFull);
  EXPECT_EQ (r.next (), 0x6E789E6AA1B965F4ull);
  Rng u (7);
  for (int i = 0; i < 1000; i++) {
    const double v = u.uniform (-2, 3);
    EXPECT_GE (v, -2);
    EXPECT_LT (v, 3);
  }
}

TEST (SimWorld, ScenesAreSeededReachableAndApart)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  std::set<unsigned> targets;
  for (uint64_t seed = 0; seed < 200; seed++) {
    World a (robot, seed), b (robot, seed);
    ASSERT_EQ (a.blocks ().size (), 3u);
    EXPECT_EQ (a.instruction (), b.instruction ());
    EXPECT_EQ (a.joints (), b.joints ());
    for (size_t i = 0; i < 3; i++) {
      EXPECT_EQ (a.blocks ()[i].at.x, b.blocks ()[i].at.x);
      EXPECT_GE (dist (a.blocks ()[i].at, a.tool ()), 0.15);
      std::vector<float> q;
      EXPECT_TRUE (
          solve_ik (a.options ().links, robot, a.blocks ()[i].at, a.joints ().data (), &q));
      for (size_t j = 0; j < i; j++)
        EXPECT_GE (dist (a.blocks ()[i].at, a.blocks ()[j].at), 2 * a.options ().block_size);
    }
    EXPECT_EQ (a.instruction (), "touch the " + a.blocks ()[a.target ()].colour + " block");
    targets.insert (a.target ());
  }
  EXPECT_EQ (targets.size (), 3u); // every block gets named
  World c (robot, 1), d (robot, 2);
  EXPECT_NE (c.blocks ()[0].at.x, d.blocks ()[0].at.x);
}

TEST (SimWorld, RefusesWhatItCannotSimulate)
{
  pi0::proto::RobotConfig seven;
  std::string err;
  ASSERT_TRUE (pi0::proto::load_robot_config (
      pi0test::source_root () + "/pipelines/robot-7dof.json", &seven, &err))
      << err;
  EXPECT_THROW (World (seven, 0), std::invalid_argument);
  SceneOptions o;
  o.blocks = 9;
  EXPECT_THROW (World (planar_robot (), 0, o), std::invalid_argument);
  o.blocks = 3;
  o.time_limit = 0;
  EXPECT_THROW (World (planar_robot (), 0, o), std::invalid_argument);
  o.time_limit = 60;
  o.actuation_noise = -0.1;
  EXPECT_THROW (World (planar_robot (), 0, o), std::invalid_argument);
  o.actuation_noise = std::numeric_limits<double>::quiet_NaN ();
  EXPECT_THROW (World (planar_robot (), 0, o), std::invalid_argument);
}

/* The arm misses its commands by at most the noise, the same way for the same seed, and the
 * scene is the one without noise. */
TEST (SimWorld, ActuationNoiseIsBoundedSeededAndLeavesTheScene)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  SceneOptions noisy;
  noisy.actuation_noise = 0.02;
  World clean (robot, 9), a (robot, 9, noisy), b (robot, 9, noisy);
  ASSERT_EQ (a.joints (), clean.joints ());
  ASSERT_EQ (a.target (), clean.target ());
  for (size_t i = 0; i < clean.blocks ().size (); i++)
    EXPECT_EQ (a.blocks ()[i].at.x, clean.blocks ()[i].at.x);
  bool missed = false;
  for (int t = 0; t < 20; t++) {
    std::vector<float> cmd = a.joints ();
    for (float &q : cmd)
      q += 0.01f; // within max_step and the limits from the start
    a.step (cmd.data ());
    b.step (cmd.data ());
    EXPECT_EQ (a.joints (), b.joints ()); // seeded
    for (int j = 0; j < 3; j++) {
      EXPECT_LE (std::fabs (a.joints ()[j] - cmd[j]), 0.02 + 1e-6) << t << " " << j;
      missed |= a.joints ()[j] != cmd[j];
    }
  }
  EXPECT_TRUE (missed);
}

TEST (SimWorld, InverseKinematicsReachesThePoint)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  Rng rng (3);
  const std::array<double, 3> links{0.30, 0.25, 0.10};
  int solved = 0;
  for (int i = 0; i < 500; i++) {
    const double r = rng.uniform (0.2, 0.64), a = rng.uniform (0.3, 2.8);
    const Vec2 t{r * std::cos (a), r * std::sin (a)};
    std::vector<float> q;
    if (!solve_ik (links, robot, t, robot.initial.data (), &q))
      continue;
    solved++;
    const Vec2 got = arm_points (links, q.data ())[3];
    EXPECT_LT (dist (got, t), 1e-5);
    for (int j = 0; j < 3; j++) {
      EXPECT_GE (q[j], robot.lower[j]);
      EXPECT_LE (q[j], robot.upper[j]);
    }
  }
  EXPECT_GT (solved, 450);
  std::vector<float> q;
  EXPECT_FALSE (solve_ik (links, robot, {0.0, 0.9}, robot.initial.data (), &q)); // out of reach
}

TEST (SimWorld, StepsAreClampedAndNonFiniteCommandsAreNotExecuted)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  World w (robot, 5);
  const std::vector<float> before = w.joints ();
  const float far[3] = {100.0f, -100.0f, 0.0f};
  EXPECT_TRUE (w.step (far));
  EXPECT_NEAR (w.joints ()[0], before[0] + robot.max_step[0], 1e-6); // max_step, then limits
  EXPECT_NEAR (w.joints ()[1], std::max (robot.lower[1], before[1] - robot.max_step[1]), 1e-6);
  const std::vector<float> now = w.joints ();
  const float nan[3] = {std::numeric_limits<float>::quiet_NaN (), 0, 0};
  EXPECT_FALSE (w.step (nan));
  EXPECT_EQ (w.joints (), now);
  EXPECT_EQ (w.ticks (), 2u);
}

TEST (SimWorld, TheExpertTouchesTheNamedBlock)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  unsigned success = 0, longest = 0;
  for (uint64_t seed = 0; seed < 300; seed++) {
    World w (robot, seed);
    const Outcome o = run_episode (w, [] (const World &w) { return expert_chunk (w, 10); });
    EXPECT_EQ (o, Outcome::Success) << "seed " << seed << ": " << outcome_name (o);
    success += o == Outcome::Success;
    longest = std::max (longest, w.decided_at ());
  }
  EXPECT_EQ (success, 300u);
  EXPECT_LE (longest, 30u); // well inside the 60-tick limit
  // Its rows never make the robot clamp: under max_step from one row to the next.
  World w (robot, 11);
  std::vector<float> prev = w.joints ();
  for (const std::vector<float> &row : expert_chunk (w, 30)) {
    for (int j = 0; j < 3; j++)
      EXPECT_LE (std::fabs (row[j] - prev[j]), robot.max_step[j]);
    prev = row;
  }
}

/* The instruction matters: an arm that goes to one fixed block whatever it is told succeeds
 * only when that block is the named one, and is judged "wrong" otherwise; an arm that never
 * moves runs out of time. */
TEST (SimWorld, TheJudgeNeedsTheNamedBlock)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  unsigned success = 0, wrong = 0, named_first = 0;
  for (uint64_t seed = 0; seed < 120; seed++) {
    World w (robot, seed);
    named_first += w.target () == 0;
    // The expert's motion, towards block 0 always.
    auto to_first = [] (const World &w) {
      return expert_chunk (w.with_target (0), 10);
    };
    const Outcome o = run_episode (w, to_first);
    success += o == Outcome::Success;
    wrong += o == Outcome::Wrong;
  }
  EXPECT_EQ (success, named_first);
  EXPECT_EQ (wrong, 120 - named_first);
  EXPECT_GT (named_first, 20u);
  EXPECT_LT (named_first, 60u);
  World still (robot, 4);
  while (!still.done ())
    still.hold ();
  EXPECT_EQ (still.outcome (), Outcome::Timeout);
  EXPECT_EQ (still.decided_at (), still.options ().time_limit);
}

/* The moving task (issue 44): the blocks turn about the base together, within 20-160 degrees,
 * at the scene's speed and the same distance from the base; the static task's scenes are what
 * they were; the expert, aiming where the block will be, touches the named one in every scene,
 * and a plan made for where the block was misses more the later it runs. */
TEST (SimWorld, OnTheMovingTaskBlocksTurnAndTheExpertLeadsThem)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  SceneOptions moving;
  moving.block_speed = 0.15;
  moving.block_speed_spread = 0.5;
  unsigned success = 0, longest = 0;
  double lo = 1, hi = 0;
  for (uint64_t seed = 0; seed < 300; seed++) {
    World w (robot, seed, moving);
    const World still (robot, seed);
    // The same scene as the static task's at the start; only the table moves.
    ASSERT_EQ (w.blocks ().size (), still.blocks ().size ());
    EXPECT_EQ (w.target (), still.target ());
    EXPECT_EQ (w.joints (), still.joints ());
    for (size_t i = 0; i < w.blocks ().size (); i++)
      EXPECT_EQ (dist (w.blocks ()[i].at, still.blocks ()[i].at), 0.0);
    // The scene's speed, m per tick at 0.5 m: within 0.15 x (1 +- 0.5) m/s.
    const double speed = std::fabs (w.table_turn ()) * 0.5 * 10;
    lo = std::min (lo, speed);
    hi = std::max (hi, speed);
    EXPECT_GE (speed, 0.075 - 1e-9);
    EXPECT_LE (speed, 0.225 + 1e-9);
    const Vec2 ahead = w.block_ahead (w.target (), 3);
    World probe = w;
    for (int k = 0; k < 3; k++)
      probe.hold ();
    EXPECT_LT (dist (probe.blocks ()[w.target ()].at, ahead), 1e-12);
    const double r0 = std::hypot (w.blocks ()[0].at.x, w.blocks ()[0].at.y);
    const Outcome o = run_episode (w, [] (const World &w) { return expert_chunk (w, 10); });
    EXPECT_EQ (o, Outcome::Success) << "seed " << seed << ": " << outcome_name (o);
    success += o == Outcome::Success;
    longest = std::max (longest, w.decided_at ());
    EXPECT_NEAR (std::hypot (w.blocks ()[0].at.x, w.blocks ()[0].at.y), r0, 1e-9);
  }
  EXPECT_EQ (success, 300u);
  EXPECT_LE (longest, 20u);
  EXPECT_LT (lo, 0.09);
  EXPECT_GT (hi, 0.21);
  // Left alone for a minute, the table turns back at its ends and keeps every block in reach.
  World w (robot, 3, moving);
  int turns = 0;
  double last = w.table_turn ();
  for (int t = 0; t < 600; t++) {
    w.hold ();
    turns += (w.table_turn () > 0) != (last > 0);
    last = w.table_turn ();
    for (const Block &b : w.blocks ()) {
      const double a = std::atan2 (b.at.y, b.at.x) * 180 / 3.14159265358979;
      EXPECT_GE (a, 20 - 1e-6);
      EXPECT_LE (a, 160 + 1e-6);
    }
  }
  EXPECT_GE (turns, 2);
  // One frame shows the motion: the overhead camera draws a moving block's trail (the static
  // scene's pixels are what they were); the front camera shows the blocks only.
  const World first (robot, 3, moving), still (robot, 3);
  EXPECT_NE (pixels (first, Camera::Overhead), pixels (still, Camera::Overhead));
  EXPECT_EQ (pixels (first, Camera::Front), pixels (still, Camera::Front));
  // A plan that runs late aims where the block was: the expert's chunk made k ticks before it
  // runs (the world held meanwhile) succeeds less often as k grows.
  unsigned late_success[3] = {};
  const unsigned lateness[3] = {0, 4, 8};
  for (int i = 0; i < 3; i++)
    for (uint64_t seed = 0; seed < 100; seed++) {
      SceneOptions tight = moving;
      tight.time_limit = 20;
      World w (robot, seed, tight);
      while (!w.done ()) {
        const std::vector<std::vector<float>> chunk = expert_chunk (w, 10);
        for (unsigned k = 0; k < lateness[i] && !w.done (); k++)
          w.hold ();
        for (unsigned k = 0; k < 5 && !w.done (); k++)
          w.step (chunk[k].data ());
      }
      late_success[i] += w.outcome () == Outcome::Success;
    }
  EXPECT_EQ (late_success[0], 100u);
  EXPECT_LT (late_success[2], late_success[1]);
  EXPECT_LT (late_success[1], late_success[0]);
}

/* The instruction's wording: canonical is the static task's sentence; the training and held-out
 * templates are apart, each names the block's colour (in any case), and the case and the
 * punctuation vary; the wording is seeded apart from the scene. */
TEST (SimWorld, InstructionsAreWordedAsTheOptionsSay)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  for (const std::string &t : phrasing_templates (Phrasing::Train))
    for (const std::string &h : phrasing_templates (Phrasing::Heldout))
      EXPECT_NE (t, h);
  Phrasing p;
  EXPECT_TRUE (parse_phrasing ("heldout", &p));
  EXPECT_EQ (p, Phrasing::Heldout);
  EXPECT_FALSE (parse_phrasing ("Heldout", &p));
  for (Phrasing ph : {Phrasing::Train, Phrasing::Heldout}) {
    std::set<std::string> words, templates;
    unsigned upper = 0, capital = 0, punct = 0;
    for (uint64_t seed = 0; seed < 400; seed++) {
      SceneOptions o;
      o.phrasing = ph;
      const World w (robot, seed, o);
      const World plain (robot, seed);
      EXPECT_EQ (plain.instruction (),
                 "touch the " + plain.blocks ()[plain.target ()].colour + " block");
      EXPECT_EQ (w.target (), plain.target ());
      const std::string s = w.instruction ();
      std::string lower = s;
      for (char &c : lower)
        c = (char)std::tolower ((unsigned char)c);
      EXPECT_NE (lower.find (w.blocks ()[w.target ()].colour), std::string::npos) << s;
      words.insert (s);
      std::string colour = w.blocks ()[w.target ()].colour;
      for (char &c : colour)
        c = (char)std::toupper ((unsigned char)c);
      upper += s.find (colour) != std::string::npos;
      capital += std::isupper ((unsigned char)s[0]) != 0;
      punct += std::ispunct ((unsigned char)s.back ()) != 0;
      // Which template: the sentence with the colour put back as "{c}".
      const size_t at = lower.find (w.blocks ()[w.target ()].colour);
      std::string t = lower.substr (0, at) + "{c}" + lower.substr (at + colour.size ());
      while (!t.empty () && std::ispunct ((unsigned char)t.back ()) && t.back () != '}')
        t.pop_back ();
      templates.insert (t);
    }
    std::set<std::string> all (phrasing_templates (ph).begin (), phrasing_templates (ph).end ());
    EXPECT_EQ (templates, all) << phrasing_name (ph);
    EXPECT_GT (words.size (), 100u);
    EXPECT_GT (upper, 40u);
    EXPECT_GT (capital, 40u);
    EXPECT_GT (punct, 200u);
  }
}

TEST (SimRender, CamerasAreDeterministicAndSeeTheScene)
{
  const pi0::proto::RobotConfig robot = planar_robot ();
  World w (robot, 9);
  for (Camera c : {Camera::Overhead, Camera::Front, Camera::Wrist}) {
    Camera parsed;
    ASSERT_TRUE (camera_from_name (camera_name (c), &parsed));
    EXPECT_EQ (parsed, c);
    EXPECT_EQ (pixels (w, c), pixels (w, c)) << camera_name (c);
  }
  EXPECT_NE (pixels (w, Camera::Overhead), pixels (w, Camera::Front));
  // The fixed cameras see every block, in its colour.
  for (Camera c : {Camera::Overhead, Camera::Front}) {
    const std::vector<uint8_t> px = pixels (w, c, 224, 224);
    for (const Block &b : w.blocks ())
      EXPECT_GT (count_colour (px, b.rgb), 15u) << camera_name (c) << " " << b.colour;
  }
  // Moving the arm changes every view; the wrist camera sees the named block when the tool is
  // over it, and it fills more of that view than of the overhead one.
  const std::vector<uint8_t> wrist0 = pixels (w, Camera::Wrist),
                             over0 = pixels (w, Camera::Overhead);
  while (!w.done ())
    for (const std::vector<float> &row : expert_chunk (w, 5))
      w.step (row.data ());
  ASSERT_EQ (w.outcome (), Outcome::Success);
  EXPECT_NE (pixels (w, Camera::Wrist), wrist0);
  EXPECT_NE (pixels (w, Camera::Overhead), over0);
  const std::array<uint8_t, 3> named = w.blocks ()[w.target ()].rgb;
  EXPECT_GT (count_colour (pixels (w, Camera::Wrist), named),
             4 * count_colour (pixels (w, Camera::Overhead), named));
}

TEST (SimRender, RefusesBadSizes)
{
  World w (planar_robot (), 0);
  std::vector<uint8_t> px (64 * 64 * 3);
  std::string err;
  EXPECT_FALSE (render (w, Camera::Overhead, 8, 8, px.data (), 24, &err));
  EXPECT_NE (err.find ("out of range"), std::string::npos) << err;
  EXPECT_FALSE (render (w, Camera::Overhead, 64, 64, px.data (), 100, &err));
  EXPECT_NE (err.find ("stride"), std::string::npos) << err;
  EXPECT_FALSE (write_png (w, Camera::Front, 32, 32, "/nonexistent/dir/x.png", &err));
  EXPECT_NE (err.find ("/nonexistent/dir/x.png"), std::string::npos) << err;
  Camera c;
  EXPECT_FALSE (camera_from_name ("side", &c));
}
