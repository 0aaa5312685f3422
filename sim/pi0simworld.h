/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The simulated world of the closed loop (docs/sim.md): a planar three-joint arm over a table
 * with coloured blocks on it, a task whose instruction names one of them ("touch the red
 * block"), and the scripted expert that solves it. No GStreamer, no clock: the world advances
 * one control tick per command, so everything here is deterministic for a seed.
 *
 * Coordinates: metres on the table, x to the right, y away from the arm's base at (0, 0), z up.
 * The arm moves in the plane above the table (a SCARA arm seen from above): joint 0 turns the
 * first link about the base, joints 1 and 2 are relative to the link before; its tool points
 * down from the end of the last link, and "touching" a block is the tool's tip within
 * touch_radius of the block's centre in the plane. */
#pragma once

#include "protocol/pi0safety.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pi0::sim
{

struct Vec2 {
  double x = 0, y = 0;
};

/* A deterministic random stream (splitmix64): the same numbers on every machine and compiler,
 * which std's distributions do not promise. */
class Rng
{
public:
  explicit Rng (uint64_t seed) : s_ (seed) {}
  uint64_t next ();
  /* Uniform in [lo, hi). */
  double uniform (double lo, double hi);

private:
  uint64_t s_;
};

struct Block {
  std::string colour;           /* "red", "green", "blue", ... */
  std::array<uint8_t, 3> rgb{}; /* how the cameras see it */
  Vec2 at;                      /* centre */
  double yaw = 0;               /* rotation about z, radians */
};

/* How the instruction is worded (docs/sim.md, "The instruction"). */
enum class Phrasing {
  Canonical, /* "touch the red block", every scene (the static task's recordings) */
  Train,     /* one of the training templates, with case and punctuation varied */
  Heldout,   /* one of the phrasings kept out of training (for evaluation), varied alike */
};
/* "canonical", "train", "heldout"; parse_phrasing() is false for another word. */
const char *phrasing_name (Phrasing p);
bool parse_phrasing (const std::string &word, Phrasing *p);
/* The templates of @p, "{c}" where the colour goes (one, "touch the {c} block", for
 * Canonical). */
const std::vector<std::string> &phrasing_templates (Phrasing p);

struct SceneOptions {
  std::array<double, 3> links{0.30, 0.25, 0.10}; /* link lengths, m */
  /* Side of the square blocks, m: 7.7 pixels of a 96-pixel overhead view. At 0.07 (5 pixels, a
   * sixth of a 12-pixel patch) a small pi0 trained from scratch never learnt where they were. */
  double block_size = 0.10;
  double touch_radius = 0.06;  /* tool tip to block centre, m: within the block's footprint */
  unsigned blocks = 3;         /* 1 to 5 (red, green, blue, yellow, purple) */
  unsigned time_limit = 60;    /* control ticks per episode */
  double control_rate = 10;    /* ticks per second */
  double initial_jitter = 0.1; /* per-joint noise on the start, radians */
  /* The arm misses each command by up to this much per joint, radians (uniform, seeded by the
   * scene but drawn apart from it: the same scene with or without). Demonstrations recorded
   * with it show the expert recovering from states its clean runs never visit. */
  double actuation_noise = 0;
  /* The moving task (docs/sim.md, "The moving task"): the blocks ride a turntable about the
   * arm's base that turns at this speed, m/s at 0.5 m from the base (0: the static task). Each
   * scene draws its direction and its speed, uniform in block_speed x (1 +- block_speed_spread);
   * the table turns back when a block would leave 20-160 degrees of the arm's forward
   * direction. Drawn apart from the scene: the same blocks start in the same places. */
  double block_speed = 0;
  double block_speed_spread = 0;
  Phrasing phrasing = Phrasing::Canonical;
};

/* What an episode came to. */
enum class Outcome {
  Running,
  Success, /* the tool touched the named block */
  Wrong,   /* it touched another block first */
  Timeout, /* time_limit ticks without a touch */
};
const char *outcome_name (Outcome o);

class World
{
public:
  /* A random scene for @seed: block places (reachable, apart, each reachable from the start
   * in a straight line that passes no other block), the named block, the start (the robot
   * configuration's initial position plus jitter). @robot must have three joints. Throws
   * std::invalid_argument for a configuration it cannot use. */
  World (const proto::RobotConfig &robot, uint64_t seed, const SceneOptions &options = {});

  const SceneOptions &options () const { return o_; }
  const proto::RobotConfig &robot () const { return robot_; }
  const std::vector<Block> &blocks () const { return blocks_; }
  unsigned target () const { return target_; }
  /* The task in words, as SceneOptions::phrasing words it ("touch the red block"). */
  std::string instruction () const;
  uint64_t seed () const { return seed_; }
  /* The turntable's angle (radians from where the scene put the blocks) and its turn per
   * tick, signed (0 for the static task). */
  double table_angle () const { return table_; }
  double table_turn () const { return turn_; }
  /* Block @index with the turntable at @angle (radians from where the scene put it). */
  Block block_at_angle (unsigned index, double angle) const;
  /* Where block @index will be after @ticks more ticks (its centre), the turntable's way. */
  Vec2 block_ahead (unsigned index, unsigned ticks) const;
  /* The same scene, arm and time with block @index named instead (for controls); throws
   * std::out_of_range for an index past the blocks. */
  World with_target (unsigned index) const;

  /* The joint positions (radians), what the state pad gets. */
  const std::vector<float> &joints () const { return q_; }
  /* The points of the arm: base, the two joints after it, the tool. */
  std::array<Vec2, 4> points () const;
  Vec2 tool () const { return points ()[3]; }
  /* The direction the last link points, radians. */
  double tool_heading () const;

  /* One control tick: the arm goes to @command (dim values, radians), clamped into the joint
   * limits and to max_step from where it is, as pi0-robotsim's receiver clamps a row. A
   * non-finite command is not executed (the arm stays; returns false). After the episode has
   * ended the arm still moves, but the outcome stays. Returns true when executed. */
  bool step (const float *command);
  /* Holds still for one tick (a robot with no command). */
  void hold ();

  unsigned ticks () const { return ticks_; }
  Outcome outcome () const { return outcome_; }
  bool done () const { return outcome_ != Outcome::Running; }
  /* Ticks until the outcome was decided (the tick of the touch or the limit). */
  unsigned decided_at () const { return decided_at_; }

private:
  void judge ();
  void turn_table ();
  void place_blocks ();

  proto::RobotConfig robot_;
  SceneOptions o_;
  uint64_t seed_;
  std::vector<Block> blocks_;
  std::vector<Block> home_; /* the blocks at table angle 0 */
  double table_ = 0, turn_ = 0, table_lo_ = 0, table_hi_ = 0;
  unsigned template_ = 0, case_ = 0, punct_ = 0; /* the wording drawn for the scene */
  unsigned target_ = 0;
  std::vector<float> q_;
  unsigned ticks_ = 0;
  Outcome outcome_ = Outcome::Running;
  unsigned decided_at_ = 0;
  Rng noise_;
};

/* Forward kinematics of the planar arm: base, joint 1, joint 2, tool. */
std::array<Vec2, 4> arm_points (const std::array<double, 3> &links, const float *q);

/* Joint positions that put the tool at @target with the last link pointing away from the
 * base, on the elbow side closest to @near; false when out of reach or out of the limits. */
bool solve_ik (const std::array<double, 3> &links, const proto::RobotConfig &robot, Vec2 target,
               const float *near, std::vector<float> *q);

/* The scripted expert: the next @horizon commands (rows of dim joint positions) from where the
 * world is now. The tool moves towards the named block in a straight line at speed m per tick
 * (each joint's step also kept under the robot's max_step), then stays on it; on the moving
 * task, towards where the block will be when the row runs. Reads the world's privileged state
 * (the block places and the turntable): it plays the demonstrator, not a policy. */
std::vector<std::vector<float>> expert_chunk (const World &world, unsigned horizon,
                                              double speed = 0.03);

} // namespace pi0::sim
