/* Real-time chunking (RTC; Black, Galliker, Levine 2025, docs/rtc.md): what a guided sampling
 * call asks for (RtcGuidance) and the two schedules it follows, the mask over the chunk's rows and
 * the guidance weight over the steps. The guided loop is Pi0Model::denoise_loop_guided
 * (pi0model.h); all three are defined in pi0rtcguidance.cpp.
 *
 * While the robot executes the current chunk, the next one is sampled so that its first rows
 * agree with what will still be executed: at each Euler step the velocity is corrected toward
 * the executing chunk's remaining actions (the "prefix"), weighted by a soft mask over rows.
 *
 * Time conventions. The paper integrates tau from 0 (noise) to 1 (data) with
 * A <- A + v_paper / n; pi0 (openpi, LeRobot, denoise_loop) integrates t from 1 (noise) to 0
 * (data) with x <- x + dt * v, dt = -1/n, and v = noise - data = -v_paper. So tau = 1 - t, the
 * data estimate is x1 = x - t * v (the paper's A + (1 - tau) v_paper), the correction
 * J^T diag(W) (Y - x1) (J = dx1/dx, the same in both conventions) is *subtracted* from pi0's v
 * where the paper adds it, and the guidance weight is the paper's
 *   min(beta, (1 - tau)/tau * ((1 - tau)^2 + tau^2) / (1 - tau)^2)   evaluated at tau = 1 - t
 * (beta at t = 1, where the formula is infinite). */
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "inference/model/pi0rtcmodes.h"

namespace pi0
{

/* RtcSchedule (the mask W) and RtcJacobian: inference/model/pi0rtcmodes.h. */

struct RtcGuidance {
  /* The executing chunk's actions that will still run when this inference starts, row 0 aligned
   * with the new chunk's row 0: float [B,R,A] or [R,A] (broadcast over the batch), R <= horizon,
   * A <= action_dim, in the model's normalised space. Missing rows and dims are zero-padded (as
   * LeRobot pads); rows from the mask's end on are ignored. Must be finite (else pi0::Error).
   * Undefined: no guidance, the plain sampler. */
  at::Tensor prefix;
  int64_t delay = 0;             // d: rows that execute before the new chunk takes over (weight 1)
  int64_t execution_horizon = 0; // s: the mask ends at row min(horizon - s, R); rows after are free
  double max_guidance_weight = 5.0; // beta: the clip of the guidance weight (>= 0; 0 = no guidance)
  RtcSchedule schedule = RtcSchedule::Exp;
  RtcJacobian jacobian = RtcJacobian::Vjp;
};

/* The mask W, float [horizon] on the CPU: rows [0, min(delay, end)) weigh 1, rows [end, horizon)
 * weigh 0, the middle follows `schedule`. Throws pi0::Error on delay < 0 or end outside
 * [0, horizon]. Equals LeRobot's RTCProcessor.get_prefix_weights(delay, end, horizon). */
at::Tensor rtc_prefix_weights (int64_t delay, int64_t end, int64_t horizon, RtcSchedule schedule);

/* The guidance weight at pi0 time t (noise at 1) for clip beta, in float32 arithmetic as LeRobot
 * computes it: beta at t = 1, 0 at t = 0. */
float rtc_guidance_weight (double t, double max_guidance_weight);

} // namespace pi0
