/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Safety rules for actions. Any change here needs a test in tests/test_protocol.cpp. */

#include "pi0safety.h"

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0safety.cpp must be built without -ffast-math/-ffinite-math-only: they break NaN checks"
#endif

#include <json-glib/json-glib.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace pi0safety
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

bool
read_array (JsonObject *obj, const char *name, size_t want, bool required, std::vector<float> *out,
            std::string *error)
{
  if (!json_object_has_member (obj, name)) {
    if (required)
      *error = std::string ("missing \"") + name + "\"";
    return !required;
  }
  JsonNode *node = json_object_get_member (obj, name);
  if (!JSON_NODE_HOLDS_ARRAY (node)) {
    *error = std::string ("\"") + name + "\" must be an array of numbers";
    return false;
  }
  JsonArray *arr = json_node_get_array (node);
  if (json_array_get_length (arr) != want) {
    *error = std::string ("\"") + name + "\" has " + std::to_string (json_array_get_length (arr)) +
             " values but \"joints\" has " + std::to_string (want);
    return false;
  }
  out->clear ();
  for (guint i = 0; i < want; i++) {
    JsonNode *e = json_array_get_element (arr, i);
    if (!JSON_NODE_HOLDS_VALUE (e) || (json_node_get_value_type (e) != G_TYPE_DOUBLE &&
                                       json_node_get_value_type (e) != G_TYPE_INT64)) {
      *error = std::string ("\"") + name + "\"[" + std::to_string (i) + "] is not a number";
      return false;
    }
    const double d = json_node_get_double (e);
    /* A limit that does not fit a float would turn into ±Inf when stored. */
    if (!std::isfinite (d) || std::fabs (d) > std::numeric_limits<float>::max ()) {
      *error = std::string ("\"") + name + "\"[" + std::to_string (i) + "] is not a finite float";
      return false;
    }
    out->push_back ((float)d);
  }
  return true;
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
parse_robot_config (const std::string &json, RobotConfig *out, std::string *error)
{
  std::string err;
  RobotConfig cfg;
  JsonParser *parser = json_parser_new ();
  GError *gerr = nullptr;
  bool ok = false;

  if (!json_parser_load_from_data (parser, json.data (), (gssize)json.size (), &gerr)) {
    err = std::string ("not valid JSON: ") + gerr->message;
    g_clear_error (&gerr);
    goto done;
  }
  {
    JsonNode *root = json_parser_get_root (parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
      err = "the top level must be an object";
      goto done;
    }
    JsonObject *obj = json_node_get_object (root);
    if (!json_object_has_member (obj, "joints") ||
        !JSON_NODE_HOLDS_ARRAY (json_object_get_member (obj, "joints"))) {
      err = "missing \"joints\" (an array of joint names)";
      goto done;
    }
    JsonArray *joints = json_object_get_array_member (obj, "joints");
    const guint n = json_array_get_length (joints);
    if (n == 0 || n > 256) {
      err = "\"joints\" must name between 1 and 256 joints";
      goto done;
    }
    for (guint i = 0; i < n; i++) {
      JsonNode *e = json_array_get_element (joints, i);
      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING) {
        err = "\"joints\"[" + std::to_string (i) + "] is not a string";
        goto done;
      }
      cfg.joint_names.emplace_back (json_node_get_string (e));
    }
    if (!read_array (obj, "lower", n, true, &cfg.lower, &err) ||
        !read_array (obj, "upper", n, true, &cfg.upper, &err) ||
        !read_array (obj, "max_step", n, true, &cfg.max_step, &err) ||
        !read_array (obj, "initial", n, false, &cfg.initial, &err))
      goto done;
    for (guint i = 0; i < n; i++) {
      const std::string j = "joint " + std::to_string (i) + " (" + cfg.joint_names[i] + ")";
      if (!(cfg.lower[i] <= cfg.upper[i])) {
        err = j + ": lower limit is above the upper limit";
        goto done;
      }
      if (!(cfg.max_step[i] > 0.0f)) {
        err = j + ": max_step must be > 0";
        goto done;
      }
      if (!cfg.initial.empty () &&
          !(cfg.initial[i] >= cfg.lower[i] && cfg.initial[i] <= cfg.upper[i])) {
        err = j + ": initial position is outside the limits";
        goto done;
      }
    }
    ok = true;
  }
done:
  g_object_unref (parser);
  if (ok)
    *out = std::move (cfg);
  else if (error)
    *error = err;
  return ok;
}

bool
load_robot_config (const std::string &path, RobotConfig *out, std::string *error)
{
  gchar *text = nullptr;
  gsize len = 0;
  GError *gerr = nullptr;
  if (!g_file_get_contents (path.c_str (), &text, &len, &gerr)) {
    if (error)
      *error = std::string ("cannot read robot config: ") + gerr->message;
    g_clear_error (&gerr);
    return false;
  }
  std::string json (text, len);
  g_free (text);
  std::string err;
  if (!parse_robot_config (json, out, &err)) {
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

} // namespace pi0safety
