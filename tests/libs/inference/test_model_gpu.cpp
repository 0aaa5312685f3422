/* The native Pi0 on CUDA (suite 'gpu'; every test skips itself without a CUDA device):
 * agreement with the CPU in fp32 and bf16, and the CUDA-graph path against the eager path. */
#include "inference/model/pi0cudasupport.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

namespace
{

void
require_cuda ()
{
  if (!pi0::cuda_available ())
    GTEST_SKIP () << "no CUDA device";
}

pi0::PolicyOptions
cuda_opts (at::ScalarType dtype, bool graph)
{
  pi0::PolicyOptions o;
  o.device = c10::Device (c10::kCUDA, 0);
  o.dtype = dtype;
  o.cuda_graph = graph;
  return o;
}

} // namespace

TEST (ModelGpu, CudaFp32AgreesWithCpu)
{
  require_cuda ();
  if (testing::Test::IsSkipped ())
    return;
  auto cpu = pi0::make_pi0_policy (tiny_model (31), {});
  auto gpu = pi0::make_pi0_policy (tiny_model (31), cuda_opts (at::kFloat, false));
  for (uint64_t s : {1, 2}) {
    auto in = tiny_input (pi0::config_by_name ("pi0-tiny"), s, 7);
    in.image_masks[2] = s == 2 ? false : true;
    EXPECT_LE (rel_err (gpu->infer (in), cpu->infer (in)), 1e-4) << "seed " << s;
  }
}

TEST (ModelGpu, CudaBf16AgreesWithCpuFp32)
{
  require_cuda ();
  if (testing::Test::IsSkipped ())
    return;
  auto cpu = pi0::make_pi0_policy (tiny_model (32), {});
  auto gpu = pi0::make_pi0_policy (tiny_model (32), cuda_opts (at::kBFloat16, true));
  auto in = tiny_input (pi0::config_by_name ("pi0-tiny"), 3, 10);
  EXPECT_LE (rel_err (gpu->infer (in), cpu->infer (in)), 2e-2);
}

TEST (ModelGpu, CudaGraphEqualsEager)
{
  require_cuda ();
  if (testing::Test::IsSkipped ())
    return;
  ASSERT_TRUE (pi0::cuda_graphs_built ())
      << "CUDA device present but this build has no CUDA graph support";
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    auto eager = pi0::make_pi0_policy (tiny_model (33), cuda_opts (dt, false));
    auto graph = pi0::make_pi0_policy (tiny_model (33), cuda_opts (dt, true));
    graph->warmup (); // captures the graph on a blank observation: real ones must still get through
    EXPECT_NE (graph->describe ().find ("CUDA graph"), std::string::npos);
    // Several observations through the same captured graph: new inputs must reach it.
    for (uint64_t s : {4, 5, 6}) {
      auto in = tiny_input (pi0::config_by_name ("pi0-tiny"), s, 4 + static_cast<int> (s));
      in.image_masks[s % 3] = false;
      at::Tensor a = eager->infer (in), b = graph->infer (in);
      EXPECT_LE (max_abs (a, b), 1e-5) << c10::toString (dt) << " seed " << s;
      // The staged path (asked for stage timings) replays the denoising loop alone.
      pi0::StageTimings t;
      EXPECT_LE (max_abs (a, graph->infer (in, &t)), 1e-5) << c10::toString (dt) << " seed " << s;
      EXPECT_GT (t.total_ms, 0.0);
      EXPECT_TRUE (at::isfinite (b).all ().item<bool> ());
    }
  }
}

/* pi0.5 on CUDA: the adaRMSNorm suffix through the same eager and captured paths. */
TEST (ModelGpu, Pi05CudaAgreesWithCpuAndItsGraphWithEager)
{
  require_cuda ();
  if (testing::Test::IsSkipped ())
    return;
  auto pi05 = [] {
    auto m = std::make_shared<pi0::Pi0Model> (pi0::config_by_name ("pi05-tiny"));
    m->init_random (34);
    return m;
  };
  const pi0::Pi0Config cfg = pi0::config_by_name ("pi05-tiny");
  auto cpu = pi0::make_pi0_policy (pi05 (), {});
  auto eager = pi0::make_pi0_policy (pi05 (), cuda_opts (at::kFloat, false));
  auto graph = pi0::make_pi0_policy (pi05 (), cuda_opts (at::kFloat, true));
  auto bf16 = pi0::make_pi0_policy (pi05 (), cuda_opts (at::kBFloat16, true));
  graph->warmup ();
  for (uint64_t s : {7, 8}) {
    auto in = tiny_input (cfg, s, 30 + static_cast<int> (s));
    const at::Tensor ref = cpu->infer (in), a = eager->infer (in);
    EXPECT_LE (rel_err (a, ref), 1e-4) << "seed " << s;
    EXPECT_LE (max_abs (graph->infer (in), a), 1e-5) << "seed " << s;
    EXPECT_LE (rel_err (bf16->infer (in), ref), 2e-2) << "seed " << s;
  }
}

TEST (ModelGpu, PeakMemoryIsReported)
{
  require_cuda ();
  if (testing::Test::IsSkipped ())
    return;
  auto gpu = pi0::make_pi0_policy (tiny_model (34), cuda_opts (at::kBFloat16, true));
  pi0::cuda_reset_peak (gpu->device ());
  gpu->infer (tiny_input (pi0::config_by_name ("pi0-tiny"), 1));
  EXPECT_GT (pi0::cuda_peak_allocated_bytes (gpu->device ()), 0);
}
