/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the arm did in an episode, from its joint positions at each control tick: the measures
 * every episode line of pi0-sim reports (docs/sim.md), for the lock-step loop and the robot's
 * end across a network alike. */
#pragma once

#include "tools/pi0-sim/pi0simloop.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace pi0::tools::sim
{

/* The joints at the start and after each tick, with the chunk whose row the tick ran (`ran`:
 * a row of one was under way; the receiver numbers chunks from 0, so the id alone cannot say). */
struct Traced {
  std::vector<float> q;
  uint64_t chunk = 0;
  bool ran = false;
};

/* Fills @r's jerk (mean |third difference| / period^3 over ticks and joints), switches (ticks
 * that ran a row of another chunk than the last row run before them: the episode's first chunk
 * is no switch, a chunk after held ticks is) and the joint steps at those ticks and at the
 * others. */
inline void
measure_motion (const std::vector<Traced> &trace, double period_s, EpisodeResult *r)
{
  const double p3 = period_s * period_s * period_s;
  double jerk = 0;
  size_t n = 0;
  for (size_t i = 3; i < trace.size (); i++)
    for (size_t j = 0; j < trace[i].q.size (); j++, n++)
      jerk += std::fabs (trace[i].q[j] - 3 * trace[i - 1].q[j] + 3 * trace[i - 2].q[j] -
                         trace[i - 3].q[j]) /
              p3;
  r->jerk = n ? jerk / n : 0;
  bool had = false;
  uint64_t last = 0;
  for (size_t i = 1; i < trace.size (); i++) {
    double step = 0;
    for (size_t j = 0; j < trace[i].q.size (); j++)
      step = std::max (step, (double)std::fabs (trace[i].q[j] - trace[i - 1].q[j]));
    if (trace[i].ran && had && trace[i].chunk != last) {
      r->switches++;
      r->switch_step_sum += step;
      r->switch_step_max = std::max (r->switch_step_max, step);
    } else {
      r->step_max = std::max (r->step_max, step);
    }
    if (trace[i].ran) {
      had = true;
      last = trace[i].chunk;
    }
  }
}

} // namespace pi0::tools::sim
