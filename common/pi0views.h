/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The camera views of an observation, in view order: what pi0viewmux's pads, pi0servesrc's
 * observations, the mappings of serve/ and the metas' view names call them. In Pi0's terms they
 * are the base camera and the left and right wrist cameras (docs/design.md). */

namespace pi0
{

constexpr int kNumViews = 3;
constexpr const char *kViewNames[kNumViews] = {"main", "side", "top"};

} // namespace pi0
