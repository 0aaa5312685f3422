/* Real-time chunking's guided sampling (docs/rtc.md, pi0rtcguidance.h): the mask over the
 * chunk's rows, the guidance weight over the steps, the checks of a call's RtcGuidance, and
 * Pi0Model's guided Euler loop, whose velocity is corrected toward the executing chunk's
 * remaining actions (a vector-Jacobian product through the action expert, or LeRobot's J = I). */
#include "inference/model/pi0rtcguidance.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/autograd.h>

#include "inference/io/pi0error.h"
#include "inference/model/pi0model.h"

namespace pi0
{

at::Tensor
rtc_prefix_weights (int64_t delay, int64_t end, int64_t horizon, RtcSchedule schedule)
{
  if (horizon < 0 || end < 0 || end > horizon)
    throw Error ("RTC: the mask's end (" + std::to_string (end) + ") must be within [0, horizon " +
                 std::to_string (horizon) + "]");
  if (delay < 0)
    throw Error ("RTC: the delay must be >= 0, got " + std::to_string (delay));
  const int64_t start = std::min (delay, end); // the mask's end wins over the delay
  at::Tensor w = at::zeros ({horizon}, at::kFloat);
  switch (schedule) {
    case RtcSchedule::Zeros:
      w.narrow (0, 0, start).fill_ (1.0);
      break;
    case RtcSchedule::Ones:
      w.narrow (0, 0, end).fill_ (1.0);
      break;
    case RtcSchedule::Linear:
    case RtcSchedule::Exp: {
      w.narrow (0, 0, start).fill_ (1.0);
      const int64_t n = end - start;
      if (n > 0) {
        // c_i = (end - i) / (end - start + 1) for start <= i < end: the interior points of a
        // descent from 1 to 0, taken from linspace as LeRobot does so that the floats agree.
        at::Tensor c = at::linspace (1.0, 0.0, n + 2, at::kFloat).narrow (0, 1, n);
        if (schedule == RtcSchedule::Exp)
          c = c * at::expm1 (c).div (M_E - 1.0);
        w.narrow (0, start, n).copy_ (c);
      }
      break;
    }
  }
  return w;
}

float
rtc_guidance_weight (double t, double max_guidance_weight)
{
  // float32 throughout, in LeRobot's order, so that the parity goldens agree to the last bit;
  // tau is the paper's time. (1 - tau) / tau is +inf at tau = 0 (pi0's first step): the clip.
  const float beta = static_cast<float> (max_guidance_weight);
  const float tau = static_cast<float> (1.0 - t);
  const float one_minus = 1.0f - tau;
  const float sq = one_minus * one_minus;
  const float inv_r2 = (sq + tau * tau) / sq;
  float c = one_minus / tau;
  if (std::isinf (c) && c > 0)
    c = beta;
  float g = c * inv_r2;
  if (std::isnan (g))
    g = 0.0f; // tau = 1 (t = 0, never a step): 0 * inf
  else if (std::isinf (g) && g > 0)
    g = beta;
  return std::min (g, beta);
}

namespace
{

/* The validated guidance of one call: the prefix padded to [B, horizon, action_dim] and the
 * mask [1, horizon, 1], both fp32 on the model's device. */
struct RtcPlan {
  at::Tensor target, weights;
};

RtcPlan
plan_rtc (const RtcGuidance &rtc, const at::Tensor &x)
{
  const int64_t b = x.size (0), h = x.size (1), a = x.size (2);
  at::Tensor p = rtc.prefix;
  if (p.dim () == 2)
    p = p.unsqueeze (0);
  if (p.dim () != 3 || !at::isFloatingType (p.scalar_type ()))
    throw Error ("RTC: the prefix must be float [B,R,A] or [R,A], got " +
                 std::string (c10::toString (p.scalar_type ())) + " with " +
                 std::to_string (rtc.prefix.dim ()) + " dims");
  if (p.size (0) != b && p.size (0) != 1)
    throw Error ("RTC: the prefix has batch " + std::to_string (p.size (0)) + ", the noise " +
                 std::to_string (b));
  if (p.size (1) > h || p.size (2) > a)
    throw Error ("RTC: the prefix [" + std::to_string (p.size (1)) + ", " +
                 std::to_string (p.size (2)) + "] is larger than the chunk [" + std::to_string (h) +
                 ", " + std::to_string (a) + "]");
  if (rtc.execution_horizon < 0 || rtc.execution_horizon > h)
    throw Error ("RTC: the execution horizon must be within [0, " + std::to_string (h) + "], got " +
                 std::to_string (rtc.execution_horizon));
  if (rtc.delay < 0 || rtc.delay > h)
    throw Error ("RTC: the delay must be within [0, " + std::to_string (h) + "], got " +
                 std::to_string (rtc.delay));
  if (!(rtc.max_guidance_weight >= 0.0) || std::isinf (rtc.max_guidance_weight))
    throw Error ("RTC: the maximum guidance weight must be finite and >= 0, got " +
                 std::to_string (rtc.max_guidance_weight));
  // A non-finite prefix is refused rather than guided toward: 0 * NaN would spread it over every
  // row (the mask's zeros included), and a clamp would hide a broken upstream.
  if (!at::isfinite (p).all ().item<bool> ())
    throw Error ("RTC: the prefix (the executing chunk's remaining actions) has non-finite values");
  RtcPlan plan;
  plan.target = at::zeros ({b, h, a}, x.options ().dtype (at::kFloat));
  plan.target.narrow (1, 0, p.size (1))
      .narrow (2, 0, p.size (2))
      .copy_ (p.to (at::kFloat).expand ({b, p.size (1), p.size (2)}));
  const int64_t end = std::min (h - rtc.execution_horizon, p.size (1));
  plan.weights =
      rtc_prefix_weights (rtc.delay, end, h, rtc.schedule).to (x.device ()).view ({1, h, 1});
  return plan;
}

} // namespace

void
Pi0Model::denoise_loop_guided (const PrefixCache &cache, const at::Tensor &state, at::Tensor &x,
                               const RtcGuidance &rtc) const
{
  if (!rtc.prefix.defined ()) {
    denoise_loop (cache, state, x);
    return;
  }
  TORCH_CHECK (x.dim () == 3, "x must be [B,H,A]");
  const RtcPlan plan = plan_rtc (rtc, x);
  const int64_t b = x.size (0);
  const double dt = -1.0 / cfg_.num_steps;
  const bool vjp = rtc.jacobian == RtcJacobian::Vjp;

  // Vjp records the suffix pass with autograd on, whatever the caller's mode; what it saves for
  // the backward must not be inference tensors (the Policy runs under InferenceMode). None is:
  // the cached K/V enter through cat and the masks through logical_not (which save nothing), and
  // the error below is built off the graph. Tested (RtcTiny.SameUnderInferenceModeAndOutside).
  const SuffixLayout layout = suffix_layout (cache);

  for (int step = 0; step < cfg_.num_steps; step++) {
    const double time = 1.0 + step * dt; // as denoise_loop
    const float g = rtc_guidance_weight (time, rtc.max_guidance_weight);
    at::Tensor guided;
    if (vjp) {
      c10::InferenceMode normal (false);
      at::AutoGradMode grad (true);
      at::Tensor xg = x.clone ().requires_grad_ (true);
      at::Tensor t = at::full ({b}, static_cast<float> (time), xg.options ().dtype (at::kFloat));
      at::Tensor v = denoise_step (cache, layout, state, xg, t);
      at::Tensor x1 = xg - time * v; // the data estimate, a function of x through v
      // The error is a constant of the backward pass (LeRobot's grad_outputs): built off the
      // graph, so that the (possibly inference-mode) target and mask are never saved for it.
      at::Tensor err = (plan.target - x1.detach ()) * plan.weights;
      // J^T err with J = dx1/dx = I - t dv/dx: one backward pass through the action expert.
      at::Tensor correction = torch::autograd::grad ({x1}, {xg}, {err})[0];
      guided = v.detach () - g * correction;
    } else {
      at::Tensor t = at::full ({b}, static_cast<float> (time), x.options ().dtype (at::kFloat));
      at::Tensor v = denoise_step (cache, layout, state, x, t);
      at::Tensor x1 = x - time * v;
      guided = v - g * ((plan.target - x1) * plan.weights);
    }
    // No nan_to_num: a non-finite velocity must reach the actions, where the sink refuses them.
    x.add_ (guided, dt);
  }
}

at::Tensor
Pi0Model::sample_actions_guided (const at::Tensor &images, const at::Tensor &image_masks,
                                 const at::Tensor &tokens, const at::Tensor &token_mask,
                                 const at::Tensor &state, const at::Tensor &noise,
                                 const RtcGuidance &rtc) const
{
  PrefixCache cache = prefill (embed_prefix (images, image_masks, tokens, token_mask));
  at::Tensor x = noise.to (at::kFloat).clone ();
  denoise_loop_guided (cache, state, x, rtc);
  return x;
}

} // namespace pi0
