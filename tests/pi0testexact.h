/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

namespace pi0test
{

/* Exact test of |a - b| <= s for floats, whatever their magnitudes: a double difference can
 * round (0.5 - (-1e-45) is 0.5 in double), so the rounding error is recovered with TwoSum and
 * decides the tie. The oracle must not share the implementation's rounding. */
inline bool
exact_within (float a, float b, float s)
{
  const double x = a, y = -(double)b;
  double d = x + y;
  const double bp = d - x;
  double err = (x - (d - bp)) + (y - bp);
  if (d < 0 || (d == 0 && err < 0)) {
    d = -d;
    err = -err;
  }
  if (d != (double)s)
    return d < (double)s;
  return err <= 0;
}

} // namespace pi0test
