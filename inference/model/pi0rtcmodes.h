/* The two choices of real-time chunking's guided sampler (docs/rtc.md), shared by the model
 * (RtcGuidance, pi0rtcguidance.h) and the Policy interface (PolicyGuidance, pi0policy.h). No
 * LibTorch here. */
#pragma once

namespace pi0
{

/* The soft mask over the chunk's rows (the paper's W, LeRobot's prefix_attention_schedule). */
enum class RtcSchedule {
  Zeros,  // 1 on the first `delay` rows, 0 after ("hard" prefix only)
  Ones,   // 1 on every row before the mask's end
  Linear, // 1 on the first `delay` rows, then (end - i) / (end - delay + 1), 0 from `end` on
  Exp,    // the paper's: Linear's c_i reshaped as c_i * (e^c_i - 1) / (e - 1)
};

/* What the correction differentiates. */
enum class RtcJacobian {
  Vjp,      // the paper and its reference code (Kinetix): J^T through the action expert, one
            // backward pass of the suffix per step (the prefix K/V cache is a constant)
  Identity, // LeRobot 0.6.1 as it runs: v is computed before x requires grad, so J = I and the
            // correction is diag(W)(Y - x1); no backward pass (see docs/rtc.md)
};

} // namespace pi0
