/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Saturating time arithmetic for the robot session's two ends (pi0sender.cpp, pi0receiver.cpp):
 * timeouts may be "never" (UINT64_MAX) and times come from the network. */
#pragma once

#include <cstdint>

namespace pi0::proto
{

/* a + b, saturating. */
inline uint64_t
sat_add (uint64_t a, uint64_t b)
{
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

inline uint64_t
sat_mul (uint64_t a, uint64_t b)
{
  return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

} // namespace pi0::proto
