/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The safety rules of pi0actionsink, as plain functions so tests can drive them directly with
 * millions of inputs. Compiled without -ffast-math (pi0safety.cpp refuses to build otherwise):
 * with it GCC folds std::isnan(x) to false. */

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pi0::proto
{

/* A robot configuration (docs/elements/pi0actionsink.md, "Robot configuration"). */
struct RobotConfig {
  std::vector<std::string> joint_names;
  std::vector<float> lower, upper; /* absolute limits per joint, lower <= upper */
  std::vector<float> max_step;     /* largest change per control tick per joint, > 0 */
  std::vector<float> initial;      /* optional: position assumed before the first action */
  unsigned dim () const { return (unsigned)joint_names.size (); }
};

/* Parses a robot configuration from JSON text. Every number must be finite, every array the
 * length of "joints", lower <= upper, max_step > 0 and the initial position within limits.
 * On failure returns false with a message naming the field. */
bool parse_robot_config (const std::string &json, RobotConfig *out, std::string *error);
/* Same, from a file. */
bool load_robot_config (const std::string &path, RobotConfig *out, std::string *error);

/* True when no value is NaN or ±Inf (checked on the bits). */
bool all_finite (const float *values, size_t n);

/* Makes @out a safe command from @in: clamped into [lower, upper] and, when @prev is given,
 * into [prev - max_step, prev + max_step] (the window is computed so that the float result is
 * within max_step of prev exactly, not just up to rounding). @prev must itself be within
 * limits. @in must be finite (callers reject non-finite chunks first). Returns how many
 * values were changed. @out may alias @in. */
unsigned limit_action (const RobotConfig &cfg, const float *prev, const float *in, float *out);

enum class Verdict {
  kOk,
  kNonFinite, /* at least one NaN/Inf: the whole chunk is rejected */
  kBadShape,  /* horizon or dim is 0, or dim differs from the robot configuration */
};

/* The whole-chunk gate every chunk passes before any of it can be sent. @cfg may be null
 * (no configuration: only finiteness and shape are checked). */
Verdict check_chunk (const RobotConfig *cfg, const float *values, unsigned horizon, unsigned dim);

const char *verdict_name (Verdict v);

/* A runtime probe that this translation unit's floating-point checks work (NaN is NaN). The
 * tests call it: it fails if someone builds the safety code with -ffast-math after all. */
bool float_checks_work ();

} // namespace pi0::proto
