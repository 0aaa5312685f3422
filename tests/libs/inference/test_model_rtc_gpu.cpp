/* Real-time chunking on CUDA (suite 'gpu'; every test skips itself without a CUDA device): the
 * guided sampler, both Jacobian modes, against the CPU in fp32 and bf16. Not run in the session
 * that wrote it (no device); see docs/rtc.md. */
#include "inference/model/pi0cudasupport.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

namespace
{

struct Case {
  at::Tensor images, masks, tokens, token_mask, state, noise, prefix;
};

Case
case_on (const pi0::Pi0Model &cpu_model, const c10::Device &dev)
{
  auto in = tiny_input (cpu_model.config (), 11, 8);
  Case c{in.images.unsqueeze (0),
         in.image_masks.unsqueeze (0),
         in.tokens.unsqueeze (0),
         in.token_mask.unsqueeze (0),
         in.state.unsqueeze (0),
         in.noise.unsqueeze (0),
         {}};
  // The prefix: the tail of a chunk for other noise (what the robot would be executing).
  at::Tensor prev = cpu_model.sample_actions (c.images, c.masks, c.tokens, c.token_mask, c.state,
                                              c.noise.flip (1));
  c.prefix = prev.narrow (1, 10, 40).clone ();
  for (at::Tensor *t :
       {&c.images, &c.masks, &c.tokens, &c.token_mask, &c.state, &c.noise, &c.prefix})
    *t = t->to (dev);
  return c;
}

at::Tensor
run (const pi0::Pi0Model &m, const Case &c, pi0::RtcJacobian j)
{
  pi0::RtcGuidance r;
  r.prefix = c.prefix;
  r.delay = 4;
  r.execution_horizon = 10;
  r.max_guidance_weight = 5.0;
  r.jacobian = j;
  return m.sample_actions_guided (c.images, c.masks, c.tokens, c.token_mask, c.state, c.noise, r)
      .cpu ();
}

} // namespace

TEST (RtcGpu, GuidedOnCudaAgreesWithCpu)
{
  if (!pi0::cuda_available ())
    GTEST_SKIP () << "no CUDA device";
  auto cpu = tiny_model (43);
  const c10::Device cuda (c10::kCUDA, 0);
  const Case on_cpu = case_on (*cpu, c10::Device (c10::kCPU));
  const Case on_gpu = case_on (*cpu, cuda);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto gpu = tiny_model (43);
    gpu->set_precision (cuda, dtype);
    // fp32: TF32 is off in LibTorch by default, so only summation order differs (1e-4, as
    // test_model_gpu's plain sampler); bf16 against CPU fp32: test_model_rtc's bf16 bound.
    const double tol = dtype == at::kFloat ? 1e-4 : 3e-2;
    for (auto j : {pi0::RtcJacobian::Vjp, pi0::RtcJacobian::Identity}) {
      at::Tensor ours = run (*gpu, on_gpu, j), ref = run (*cpu, on_cpu, j);
      EXPECT_TRUE (at::isfinite (ours).all ().item<bool> ());
      EXPECT_LE (rel_err (ours, ref), tol)
          << c10::toString (dtype) << (j == pi0::RtcJacobian::Vjp ? " vjp" : " identity");
    }
  }
}
