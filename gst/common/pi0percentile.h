/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Nearest-rank percentile for the elements' stats (pi0infer's inference times, pi0actionsink's
 * per-stage latencies). */

#include <algorithm>
#include <cmath>
#include <vector>

namespace pi0
{

/* The smallest sample with at least @q of the samples at or below it (0 for none). */
template <typename T>
T
percentile (std::vector<T> v, double q)
{
  if (v.empty ())
    return T ();
  std::sort (v.begin (), v.end ());
  const size_t rank = (size_t)std::ceil (q * (double)v.size ());
  return v[std::min (rank ? rank - 1 : 0, v.size () - 1)];
}

} // namespace pi0
