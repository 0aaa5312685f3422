/* openpi's robot transforms (model/pi0transforms.h). Each formula is written in the order
 * numpy evaluates openpi's, so that the float64 results agree to the last bits (built without
 * -ffast-math and without FMA contraction, see meson.build). */
#include "inference/model/pi0transforms.h"

#include <algorithm>
#include <cmath>

#include "inference/io/pi0error.h"
#include "common/pi0transformnames.h"

namespace pi0
{

namespace
{

constexpr int kAlohaDims = 14;
constexpr int kGrippers[2] = {6, 13}; /* [left arm 6, left gripper, right arm 6, right gripper] */
/* ALOHA's joint angles to pi's: the shoulder and elbow joints of both arms turn the other way. */
constexpr double kJointFlip[kAlohaDims] = {1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1};

/* From aloha_policy.py: ALOHA's puppet gripper positions (open, closed), Interbotix's arm and
 * horn lengths, pi's gripper range in radians (encoder counts 2405..3110 of 4096, zero at 2048)
 * and ALOHA's puppet gripper joint range. */
constexpr double kLinearOpen = 0.01844, kLinearClosed = 0.05800;
constexpr double kArmLength = 0.036, kHornRadius = 0.022;
constexpr double kPiGripperMin = 0.5476, kPiGripperMax = 1.6296;
constexpr double kAlohaJointOpen = -0.6213, kAlohaJointClose = 1.4910;

double
normalize_range (double x, double lo, double hi)
{
  return (x - lo) / (hi - lo);
}

double
unnormalize_range (double x, double lo, double hi)
{
  return x * (hi - lo) + lo;
}

/* ALOHA's normalized linear gripper position to pi's normalized gripper angle (the inverse of
 * Interbotix's angle-to-linear conversion). */
double
gripper_to_angular (double g)
{
  const double linear = unnormalize_range (g, kLinearOpen, kLinearClosed);
  const double s = (kHornRadius * kHornRadius + linear * linear - kArmLength * kArmLength) /
                   (2 * kHornRadius * linear);
  const double angle = std::asin (std::clamp (s, -1.0, 1.0));
  return normalize_range (angle, kPiGripperMin, kPiGripperMax);
}

/* pi's gripper value (the model already predicts radians, offset by pi's minimum) to ALOHA's
 * normalized gripper joint. */
double
gripper_from_angular (double a)
{
  return normalize_range (a + kPiGripperMin, kAlohaJointOpen, kAlohaJointClose);
}

double
gripper_from_angular_inv (double g)
{
  return unnormalize_range (g, kAlohaJointOpen, kAlohaJointClose) - kPiGripperMin;
}

std::string
known_names ()
{
  std::string s;
  for (const char *n : kTransformNames)
    s += (s.empty () ? "" : ", ") + std::string (n);
  return s;
}

} // namespace

std::vector<bool>
make_bool_mask (const std::vector<int> &dims)
{
  std::vector<bool> mask;
  for (int d : dims)
    mask.insert (mask.end (), (size_t)std::abs (d), d > 0);
  return mask;
}

Transforms::Transforms () = default;

Transforms
Transforms::by_name (const std::string &name)
{
  Transforms t;
  if (name.empty () || name == "none")
    return t;
  t.name_ = name;
  if (name == "aloha" || name == "aloha_sim") {
    t.robot_ = Robot::Aloha;
    t.adapt_to_pi_ = true;
    if (name == "aloha")
      t.delta_mask_ = make_bool_mask ({6, -1, 6, -1});
    t.action_dims_ = t.state_dims_ = kAlohaDims;
  } else if (name == "libero" || name == "libero_absolute") {
    t.robot_ = Robot::Libero;
    if (name == "libero")
      t.delta_mask_ = make_bool_mask ({6, -1});
    t.action_dims_ = 7;
    t.state_dims_ = 8;
  } else if (name == "droid") {
    t.robot_ = Robot::Droid;
    t.action_dims_ = 8;
    t.state_dims_ = 8;
  } else {
    throw Error ("Unknown transforms '" + name + "' (known: " + known_names () +
                 "; see docs/checkpoints.md, \"openpi's robot transforms\").");
  }
  return t;
}

void
Transforms::check_state (int dims) const
{
  if (robot_ == Robot::Aloha && dims != kAlohaDims)
    throw Error ("transforms '" + name_ + "' take ALOHA's state of 14 values (both arms' 6 "
                 "joints and gripper), not " + std::to_string (dims) + ".");
  if (dims < (int)delta_mask_.size ())
    throw Error ("transforms '" + name_ + "' need a state of at least " +
                 std::to_string (delta_mask_.size ()) + " values (the actions are deltas from "
                 "it), not " + std::to_string (dims) + ".");
}

void
Transforms::check_actions (int rows, int cols, size_t size, bool out) const
{
  if (rows < 0 || cols < 0 || size != (size_t)rows * (size_t)cols)
    throw Error ("transforms '" + name_ + "': actions must be [rows, cols], row-major");
  if (!none () && (out ? cols < action_dims_ : cols != action_dims_))
    throw Error ("transforms '" + name_ + "': the actions have " + std::to_string (cols) +
                 " dims, " + (out ? "at least " : "") + std::to_string (action_dims_) +
                 " are needed.");
}

std::vector<double>
Transforms::state_in (const std::vector<double> &state) const
{
  check_state ((int)state.size ());
  std::vector<double> s = state;
  if (adapt_to_pi_) {
    for (int i = 0; i < kAlohaDims; i++)
      s[i] = kJointFlip[i] * s[i];
    for (int g : kGrippers)
      s[g] = gripper_to_angular (s[g]);
  }
  return s;
}

std::vector<double>
Transforms::actions_out (const std::vector<double> &actions, int rows, int cols,
                         const std::vector<double> &model_state) const
{
  check_actions (rows, cols, actions.size (), true);
  check_state ((int)model_state.size ());
  const int dims = none () ? cols : action_dims_;
  std::vector<double> out ((size_t)rows * dims);
  for (int r = 0; r < rows; r++) {
    const double *a = &actions[(size_t)r * cols];
    double *o = &out[(size_t)r * dims];
    for (int c = 0; c < dims; c++)
      o[c] = a[c];
    /* AbsoluteActions, before the robot's outputs (openpi pushes it to the front). */
    for (size_t c = 0; c < delta_mask_.size (); c++)
      if (delta_mask_[c])
        o[c] += model_state[c];
    if (adapt_to_pi_) {
      for (int c = 0; c < kAlohaDims; c++)
        o[c] = kJointFlip[c] * o[c];
      for (int g : kGrippers)
        o[g] = gripper_from_angular (o[g]);
    }
  }
  return out;
}

std::vector<double>
Transforms::actions_in (const std::vector<double> &actions, int rows, int cols,
                        const std::vector<double> &model_state) const
{
  check_actions (rows, cols, actions.size (), false);
  check_state ((int)model_state.size ());
  std::vector<double> out = actions;
  for (int r = 0; r < rows; r++) {
    double *o = &out[(size_t)r * cols];
    if (adapt_to_pi_) {
      for (int c = 0; c < kAlohaDims; c++)
        o[c] = kJointFlip[c] * o[c];
      for (int g : kGrippers)
        o[g] = gripper_from_angular_inv (o[g]);
    }
    for (size_t c = 0; c < delta_mask_.size (); c++)
      if (delta_mask_[c])
        o[c] -= model_state[c];
  }
  return out;
}

} // namespace pi0
