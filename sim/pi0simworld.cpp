/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "sim/pi0simworld.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <stdexcept>

namespace pi0::sim
{

namespace
{

constexpr double kPi = 3.14159265358979323846;

struct Colour {
  const char *name;
  std::array<uint8_t, 3> rgb;
};
const Colour kColours[] = {
    {"red", {215, 40, 40}},     {"green", {40, 160, 60}},   {"blue", {40, 90, 215}},
    {"yellow", {230, 200, 30}}, {"purple", {150, 60, 180}},
};

double
dist (Vec2 a, Vec2 b)
{
  return std::hypot (a.x - b.x, a.y - b.y);
}

/* Distance from @p to the segment @a-@b. */
double
dist_to_segment (Vec2 p, Vec2 a, Vec2 b)
{
  const double dx = b.x - a.x, dy = b.y - a.y;
  const double len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2 : 0;
  t = std::clamp (t, 0.0, 1.0);
  return dist (p, {a.x + t * dx, a.y + t * dy});
}

double
wrap (double a)
{
  while (a > kPi)
    a -= 2 * kPi;
  while (a <= -kPi)
    a += 2 * kPi;
  return a;
}

/* Training wordings (the sim policies' prompt is 16 tokens with BOS and the newline: each of
 * these fits the tiny test tokenizer's 14 in every case and punctuation it is given). */
const std::vector<std::string> kTrainTemplates = {
    "touch the {c} block", "tap the {c} block", "touch {c}",        "reach the {c} block",
    "go to the {c} block", "the {c} block",     "{c} block please", "tap the {c} one",
    "move to the {c} box", "hit the {c} box",   "point at {c}",     "the {c} cube",
};
/* Kept out of training, for evaluation: the three that failed (the case varies on its
 * own), the colour alone, and other wordings. "please touch the {c} block" with a capitalised
 * colour runs to 17 tokens; the prompt is cut after 14 (the colour cut too for YELLOW and
 * PURPLE). */
const std::vector<std::string> kHeldoutTemplates = {
    "touch the {c} cube",
    "please touch the {c} block",
    "{c}",
    "go for the {c} one",
    "reach for {c}",
    "tap {c} box",
    "the {c} one",
    "get the {c} block",
};
const std::vector<std::string> kCanonical = {"touch the {c} block"};

constexpr double kTableLo = 20.0 * kPi / 180, kTableHi = 160.0 * kPi / 180;

bool
within_limits (const proto::RobotConfig &robot, const std::vector<float> &q)
{
  for (size_t i = 0; i < q.size (); i++)
    if (!(q[i] >= robot.lower[i] && q[i] <= robot.upper[i]))
      return false;
  return true;
}

/* The turntable one tick on: @angle moves by @turn, turning back (reflected, so that the speed
 * stays) at either end. */
void
turn_once (double *angle, double *turn, double lo, double hi)
{
  *angle += *turn;
  if (*angle > hi) {
    *angle = 2 * hi - *angle;
    *turn = -*turn;
  } else if (*angle < lo) {
    *angle = 2 * lo - *angle;
    *turn = -*turn;
  }
}

} // namespace

uint64_t
Rng::next ()
{
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double
Rng::uniform (double lo, double hi)
{
  return lo + (hi - lo) * (double)(next () >> 11) * (1.0 / 9007199254740992.0);
}

const char *
phrasing_name (Phrasing p)
{
  switch (p) {
    case Phrasing::Canonical:
      return "canonical";
    case Phrasing::Train:
      return "train";
    case Phrasing::Heldout:
      return "heldout";
  }
  return "?";
}

bool
parse_phrasing (const std::string &word, Phrasing *p)
{
  for (Phrasing c : {Phrasing::Canonical, Phrasing::Train, Phrasing::Heldout})
    if (word == phrasing_name (c)) {
      *p = c;
      return true;
    }
  return false;
}

const std::vector<std::string> &
phrasing_templates (Phrasing p)
{
  switch (p) {
    case Phrasing::Train:
      return kTrainTemplates;
    case Phrasing::Heldout:
      return kHeldoutTemplates;
    case Phrasing::Canonical:
      break;
  }
  return kCanonical;
}

const char *
outcome_name (Outcome o)
{
  switch (o) {
    case Outcome::Running:
      return "running";
    case Outcome::Success:
      return "success";
    case Outcome::Wrong:
      return "wrong";
    case Outcome::Timeout:
      return "timeout";
  }
  return "?";
}

std::array<Vec2, 4>
arm_points (const std::array<double, 3> &links, const float *q)
{
  std::array<Vec2, 4> p{};
  double a = 0;
  for (int i = 0; i < 3; i++) {
    a += q[i];
    p[i + 1] = {p[i].x + links[i] * std::cos (a), p[i].y + links[i] * std::sin (a)};
  }
  return p;
}

bool
solve_ik (const std::array<double, 3> &links, const proto::RobotConfig &robot, Vec2 target,
          const float *near, std::vector<float> *q)
{
  const double l1 = links[0], l2 = links[1], l3 = links[2];
  const double heading = std::atan2 (target.y, target.x); // the last link points outwards
  const Vec2 w{target.x - l3 * std::cos (heading), target.y - l3 * std::sin (heading)};
  const double d2 = w.x * w.x + w.y * w.y;
  const double c2 = (d2 - l1 * l1 - l2 * l2) / (2 * l1 * l2);
  if (!(c2 >= -1.0 && c2 <= 1.0))
    return false;
  bool found = false;
  double best = 0;
  for (int sign : {-1, 1}) {
    const double q2 = sign * std::acos (c2);
    const double q1 =
        std::atan2 (w.y, w.x) - std::atan2 (l2 * std::sin (q2), l1 + l2 * std::cos (q2));
    std::vector<float> cand (3);
    // Each joint at the turn (of 2 pi) closest to where it is.
    const double raw[3] = {q1, q2, heading - q1 - q2};
    double cost = 0;
    for (int i = 0; i < 3; i++) {
      const double v = near[i] + wrap (raw[i] - near[i]);
      cand[i] = (float)v;
      cost += std::fabs (v - near[i]);
    }
    if (!within_limits (robot, cand))
      continue;
    if (!found || cost < best) {
      *q = cand;
      best = cost;
      found = true;
    }
  }
  return found;
}

World::World (const proto::RobotConfig &robot, uint64_t seed, const SceneOptions &options)
    : robot_ (robot), o_ (options), seed_ (seed), noise_ (seed ^ 0x6e6f697365000000ull)
{
  if (robot.dim () != 3)
    throw std::invalid_argument ("the simulated arm has 3 joints; the robot configuration has " +
                                 std::to_string (robot.dim ()));
  if (robot.initial.size () != 3)
    throw std::invalid_argument ("the robot configuration needs an \"initial\" position");
  if (o_.blocks < 1 || o_.blocks > std::size (kColours))
    throw std::invalid_argument ("blocks must be 1 to " + std::to_string (std::size (kColours)));
  if (!(o_.touch_radius > 0) || !(o_.block_size > 0) || o_.time_limit == 0)
    throw std::invalid_argument ("touch_radius, block_size and time_limit must be positive");
  if (!(o_.actuation_noise >= 0) || !std::isfinite (o_.actuation_noise))
    throw std::invalid_argument ("actuation_noise must be zero or more radians");
  if (!(o_.block_speed >= 0) || !std::isfinite (o_.block_speed) ||
      !(o_.block_speed_spread >= 0 && o_.block_speed_spread <= 1))
    throw std::invalid_argument ("block_speed must be zero or more, block_speed_spread 0 to 1");
  {
    // The wording and the table's motion have streams of their own: the static task's scenes,
    // canonically worded, are what they were before either existed.
    Rng words (seed ^ 0x776f726473000000ull);
    const size_t n = phrasing_templates (o_.phrasing).size ();
    template_ = (unsigned)(words.next () % n);
    if (o_.phrasing != Phrasing::Canonical) {
      const uint64_t c = words.next () % 4; // lower case half the time
      case_ = c < 2 ? 0 : (unsigned)c - 1;
      punct_ = (unsigned)(words.next () % 4);
    }
    Rng table (seed ^ 0x7461626c65000000ull);
    const double v = o_.block_speed *
                     table.uniform (1 - o_.block_speed_spread, 1 + o_.block_speed_spread) /
                     o_.control_rate;
    turn_ = (table.next () & 1 ? 1 : -1) * v / 0.5;
  }
  Rng rng (seed);
  q_.resize (3);
  for (int i = 0; i < 3; i++)
    q_[i] =
        std::clamp ((float)(robot.initial[i] + rng.uniform (-o_.initial_jitter, o_.initial_jitter)),
                    robot.lower[i], robot.upper[i]);
  const Vec2 start = tool ();
  // Where blocks go scales with the arm's reach (0.65 m with the default links).
  const double s = (o_.links[0] + o_.links[1] + o_.links[2]) / 0.65;
  // Rejection sampling: every block reachable, apart from the others and from the start, and
  // the straight way from the start to each block clear of the others (so that the expert
  // never brushes a wrong block, and neither need a policy that goes straight).
  for (int attempt = 0; attempt < 10000; attempt++) {
    blocks_.clear ();
    bool ok = true;
    for (unsigned i = 0; i < o_.blocks && ok; i++) {
      Block b;
      b.colour = kColours[i].name;
      b.rgb = kColours[i].rgb;
      const double r = rng.uniform (0.36 * s, 0.58 * s);
      const double a = rng.uniform (30.0 * kPi / 180, 150.0 * kPi / 180);
      b.at = {r * std::cos (a), r * std::sin (a)};
      b.yaw = rng.uniform (0, kPi / 2);
      std::vector<float> q;
      ok = dist (b.at, start) >= 0.15 * s && solve_ik (o_.links, robot_, b.at, q_.data (), &q);
      for (const Block &other : blocks_)
        ok = ok && dist (b.at, other.at) >= 2 * o_.block_size;
      blocks_.push_back (b);
    }
    for (size_t i = 0; i < blocks_.size () && ok; i++)
      for (size_t j = 0; j < blocks_.size () && ok; j++)
        if (i != j)
          ok = dist_to_segment (blocks_[j].at, start, blocks_[i].at) >= 2.2 * o_.touch_radius;
    if (ok) {
      target_ = (unsigned)(rng.next () % blocks_.size ());
      home_ = blocks_;
      // The turntable's reach: every block within 20-160 degrees.
      table_lo_ = -kPi;
      table_hi_ = kPi;
      for (const Block &b : home_) {
        const double a = std::atan2 (b.at.y, b.at.x);
        table_lo_ = std::max (table_lo_, kTableLo - a);
        table_hi_ = std::min (table_hi_, kTableHi - a);
      }
      return;
    }
  }
  throw std::invalid_argument ("no scene fits these options (seed " + std::to_string (seed) +
                               "): try fewer or smaller blocks");
}

std::string
World::instruction () const
{
  std::string colour = blocks_[target_].colour;
  if (case_ == 2)
    for (char &ch : colour)
      ch = (char)std::toupper ((unsigned char)ch);
  std::string s = phrasing_templates (o_.phrasing)[template_];
  const size_t at = s.find ("{c}");
  s.replace (at, 3, colour);
  if (case_ == 1)
    s[0] = (char)std::toupper ((unsigned char)s[0]);
  static const char *const kPunct[] = {"", ".", "!", "?"};
  return s + kPunct[punct_];
}

void
World::turn_table ()
{
  if (turn_ == 0)
    return;
  turn_once (&table_, &turn_, table_lo_, table_hi_);
  place_blocks ();
}

Block
World::block_at_angle (unsigned index, double angle) const
{
  Block b = home_.at (index);
  const double c = std::cos (angle), s = std::sin (angle);
  b.at = {c * home_[index].at.x - s * home_[index].at.y,
          s * home_[index].at.x + c * home_[index].at.y};
  b.yaw += angle;
  return b;
}

void
World::place_blocks ()
{
  for (unsigned i = 0; i < blocks_.size (); i++)
    blocks_[i] = block_at_angle (i, table_);
}

Vec2
World::block_ahead (unsigned index, unsigned ticks) const
{
  double angle = table_, turn = turn_;
  for (unsigned k = 0; k < ticks && turn != 0; k++)
    turn_once (&angle, &turn, table_lo_, table_hi_);
  return block_at_angle (index, angle).at;
}

World
World::with_target (unsigned index) const
{
  if (index >= blocks_.size ())
    throw std::out_of_range ("no block " + std::to_string (index));
  World w = *this;
  w.target_ = index;
  return w;
}

std::array<Vec2, 4>
World::points () const
{
  return arm_points (o_.links, q_.data ());
}

double
World::tool_heading () const
{
  return (double)q_[0] + q_[1] + q_[2];
}

bool
World::step (const float *command)
{
  ticks_++;
  turn_table ();
  if (!proto::all_finite (command, 3)) {
    judge ();
    return false;
  }
  float aimed[3];
  for (int i = 0; i < 3; i++)
    aimed[i] = command[i] + (o_.actuation_noise > 0
                                 ? (float)noise_.uniform (-o_.actuation_noise, o_.actuation_noise)
                                 : 0.0f);
  float next[3];
  proto::limit_action (robot_, q_.data (), aimed, next);
  std::copy (next, next + 3, q_.begin ());
  judge ();
  return true;
}

void
World::hold ()
{
  ticks_++;
  turn_table ();
  judge ();
}

void
World::judge ()
{
  if (outcome_ != Outcome::Running)
    return;
  const Vec2 t = tool ();
  for (unsigned i = 0; i < blocks_.size (); i++)
    if (dist (t, blocks_[i].at) <= o_.touch_radius) {
      outcome_ = i == target_ ? Outcome::Success : Outcome::Wrong;
      decided_at_ = ticks_;
      return;
    }
  if (ticks_ >= o_.time_limit) {
    outcome_ = Outcome::Timeout;
    decided_at_ = ticks_;
  }
}

std::vector<std::vector<float>>
expert_chunk (const World &world, unsigned horizon, double speed)
{
  std::vector<std::vector<float>> rows;
  std::vector<float> q = world.joints ();
  Vec2 at = arm_points (world.options ().links, q.data ())[3];
  const proto::RobotConfig &robot = world.robot ();
  for (unsigned k = 0; k < horizon; k++) {
    const Vec2 goal = world.block_ahead (world.target (), k + 1); // where it is when row k runs
    const double d = dist (at, goal);
    const Vec2 next =
        d <= speed ? goal
                   : Vec2{at.x + (goal.x - at.x) * speed / d, at.y + (goal.y - at.y) * speed / d};
    std::vector<float> want;
    if (solve_ik (world.options ().links, robot, next, q.data (), &want)) {
      // Each joint within its max_step (a little under, so the robot never clamps it).
      double scale = 1;
      for (int i = 0; i < 3; i++) {
        const double limit = 0.9 * robot.max_step[i];
        const double delta = std::fabs (want[i] - q[i]);
        if (delta > limit)
          scale = std::min (scale, limit / delta);
      }
      for (int i = 0; i < 3; i++)
        q[i] = (float)(q[i] + scale * (want[i] - q[i]));
    }
    at = arm_points (world.options ().links, q.data ())[3];
    rows.push_back (q);
  }
  return rows;
}

} // namespace pi0::sim
