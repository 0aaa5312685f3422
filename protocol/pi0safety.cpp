/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Safety rules for actions. Any change here needs a test in tests/libs/protocol/test_protocol.cpp. */

#include "protocol/pi0safety.h"

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0safety.cpp must be built without -ffast-math/-ffinite-math-only: they break NaN checks"
#endif

#include "common/pi0json.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace pi0::proto
{

namespace
{

bool
finite_bits (float v)
{
  uint32_t bits;
  memcpy (&bits, &v, 4);
  return (bits & 0x7F800000u) != 0x7F800000u;
}

/* A per-joint array: present (unless optional), @want long, every value a finite float32. */
bool
read_array (const json::Value &obj, const char *name, size_t want, bool required,
            std::vector<float> *out, std::string *error)
{
  const auto it = obj.find (name);
  if (it == obj.end ()) {
    if (required)
      *error = std::string ("missing \"") + name + "\"";
    return !required;
  }
  const std::string what = std::string ("\"") + name + "\"";
  if (it->is_array () && it->size () != want) {
    *error = what + " has " + std::to_string (it->size ()) + " values but \"joints\" has " +
             std::to_string (want);
    return false;
  }
  /* A limit that does not fit a float would turn into ±Inf when stored: to_float refuses it. */
  return json::to_float_array (*it, what, out, error);
}

/* Exactly (a - b) <= s, for finite floats. A double difference of two floats can round
 * (1e-45 - 0.1f is -0.1f in double), so TwoSum recovers the rounding error, which decides
 * the tie. Rounding to nearest is monotonic and s is exact in double, so d < s or d > s
 * already decides the strict cases. */
bool
diff_le (float a, float b, float s)
{
  const double x = a, y = -(double)b;
  const double d = x + y;
  const double bp = d - x;
  const double err = (x - (d - bp)) + (y - bp);
  if (d != (double)s)
    return d < (double)s;
  return err <= 0;
}

/* The smallest float lo with prev - lo <= step, and the largest hi with hi - prev <= step,
 * exactly. Starts from the double estimate and walks at most a few ulps. */
float
window_low (float prev, float step)
{
  const float inf = std::numeric_limits<float>::infinity ();
  float lo = (float)((double)prev - (double)step);
  while (!diff_le (prev, lo, step))
    lo = std::nextafter (lo, inf);
  for (float down = std::nextafter (lo, -inf); std::isfinite (down) && diff_le (prev, down, step);
       down = std::nextafter (lo, -inf))
    lo = down;
  return lo;
}

float
window_high (float prev, float step)
{
  const float inf = std::numeric_limits<float>::infinity ();
  float hi = (float)((double)prev + (double)step);
  while (!diff_le (hi, prev, step))
    hi = std::nextafter (hi, -inf);
  for (float up = std::nextafter (hi, inf); std::isfinite (up) && diff_le (up, prev, step);
       up = std::nextafter (hi, inf))
    hi = up;
  return hi;
}

} // namespace

bool
parse_robot_config (const std::string &text, RobotConfig *out, std::string *error)
{
  std::string err;
  RobotConfig cfg;
  auto fail = [&] (const std::string &msg) {
    if (error)
      *error = msg;
    return false;
  };
  /* Strict: a key given twice (two "max_step" arrays, say) is refused, not resolved. */
  const std::optional<json::Value> root = json::parse_strict (text, "robot config", &err);
  if (!root)
    return fail (err);
  if (!root->is_object ())
    return fail ("the top level must be an object");
  const auto joints = root->find ("joints");
  if (joints == root->end () || !joints->is_array ())
    return fail ("missing \"joints\" (an array of joint names)");
  const size_t n = joints->size ();
  if (n == 0 || n > 256)
    return fail ("\"joints\" must name between 1 and 256 joints");
  for (size_t i = 0; i < n; i++) {
    if (!(*joints)[i].is_string ())
      return fail ("\"joints\"[" + std::to_string (i) + "] is not a string");
    cfg.joint_names.push_back ((*joints)[i].get<std::string> ());
  }
  if (!read_array (*root, "lower", n, true, &cfg.lower, &err) ||
      !read_array (*root, "upper", n, true, &cfg.upper, &err) ||
      !read_array (*root, "max_step", n, true, &cfg.max_step, &err) ||
      !read_array (*root, "initial", n, false, &cfg.initial, &err))
    return fail (err);
  for (size_t i = 0; i < n; i++) {
    const std::string j = "joint " + std::to_string (i) + " (" + cfg.joint_names[i] + ")";
    if (!(cfg.lower[i] <= cfg.upper[i]))
      return fail (j + ": lower limit is above the upper limit");
    if (!(cfg.max_step[i] > 0.0f))
      return fail (j + ": max_step must be > 0");
    if (!cfg.initial.empty () &&
        !(cfg.initial[i] >= cfg.lower[i] && cfg.initial[i] <= cfg.upper[i]))
      return fail (j + ": initial position is outside the limits");
  }
  *out = std::move (cfg);
  return true;
}

bool
load_robot_config (const std::string &path, RobotConfig *out, std::string *error)
{
  /* A robot configuration is a few kB: 1 MiB is room for 10,000 joints. */
  std::string text, err;
  if (!read_regular_file (path, size_t (1) << 20, &text, &err)) {
    if (error)
      *error = "cannot read robot config " + err;
    return false;
  }
  if (!parse_robot_config (text, out, &err)) {
    if (error)
      *error = "robot config " + path + ": " + err;
    return false;
  }
  return true;
}

bool
all_finite (const float *values, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (!finite_bits (values[i]))
      return false;
  }
  return true;
}

unsigned
limit_action (const RobotConfig &cfg, const float *prev, const float *in, float *out)
{
  unsigned changed = 0;
  for (unsigned j = 0; j < cfg.dim (); j++) {
    float lo = cfg.lower[j], hi = cfg.upper[j];
    if (prev) {
      /* prev ± max_step rounded to float may land just outside the step: the window is
       * the exact set of floats within max_step of prev. */
      const float wlo = window_low (prev[j], cfg.max_step[j]);
      const float whi = window_high (prev[j], cfg.max_step[j]);
      if (wlo > lo)
        lo = wlo;
      if (whi < hi)
        hi = whi;
    }
    /* Written as comparisons, not std::clamp/fmin: the input is known finite here, and the
     * branches keep the result exactly one of {in, lo, hi}. */
    const float v = in[j];
    float r = v;
    if (r < lo)
      r = lo;
    if (r > hi)
      r = hi;
    if (r != v)
      changed++;
    out[j] = r;
  }
  return changed;
}

Verdict
check_chunk (const RobotConfig *cfg, const float *values, unsigned horizon, unsigned dim)
{
  if (horizon == 0 || dim == 0 || !values)
    return Verdict::kBadShape;
  if (cfg && cfg->dim () != dim)
    return Verdict::kBadShape;
  if (!all_finite (values, (size_t)horizon * dim))
    return Verdict::kNonFinite;
  return Verdict::kOk;
}

const char *
verdict_name (Verdict v)
{
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kNonFinite:
      return "non-finite";
    case Verdict::kBadShape:
      return "bad-shape";
  }
  return "unknown";
}

bool
float_checks_work ()
{
  volatile float zero = 0.0f;
  const float nan = zero / zero;
  const float inf = 1.0f / zero;
  return std::isnan (nan) && !std::isfinite (nan) && std::isinf (inf) && !std::isfinite (inf) &&
         !all_finite (&nan, 1) && !all_finite (&inf, 1);
}

} // namespace pi0::proto
