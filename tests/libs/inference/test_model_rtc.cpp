/* Real-time chunking at the model level (Pi0Model::denoise_loop_guided, docs/rtc.md):
 *  - parity with LeRobot 0.6.1's RTC on the tiny golden weights (tests/parity/lerobot_pi0/
 *    rtc.safetensors, made by tests/parity/make_lerobot_rtc_golden.py), both Jacobian modes;
 *  - the properties that do not need a reference: no guidance is the plain sampler, the first
 *    d rows follow the prefix, fp32 and bf16 agree, a fixed noise gives fixed actions;
 *  - the claim, on a smooth trained policy (models/pi0-tiny-sines): switch jumps >= 5x smaller;
 *  - bad input: a non-finite prefix and bad parameters are clear errors, a non-finite value that
 *    arises inside the guidance reaches the actions. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
#include <limits>

#include <c10/core/InferenceMode.h>

#include "inference/io/pi0error.h"
#include "inference/io/pi0safetensors.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

namespace
{

at::Tensor
plain (const pi0::Pi0Model &m, const Batch &b)
{
  return m.sample_actions (b.images, b.masks, b.tokens, b.token_mask, b.state, b.noise);
}

at::Tensor
guided (const pi0::Pi0Model &m, const Batch &b, const pi0::RtcGuidance &rtc)
{
  return m.sample_actions_guided (b.images, b.masks, b.tokens, b.token_mask, b.state, b.noise, rtc);
}

/* A prefix as the robot would have it: the tail (from row s) of a chunk sampled for the same
 * observation from other noise, [1, H - s, A]. */
at::Tensor
previous_tail (const pi0::Pi0Model &m, const Batch &b, int64_t s, uint64_t seed)
{
  auto gen = at::make_generator<at::CPUGeneratorImpl> (seed);
  Batch other = b;
  other.noise = at::empty (b.noise.sizes ()).normal_ (0, 1, gen);
  at::Tensor prev = plain (m, other);
  return prev.narrow (1, s, prev.size (1) - s).clone ();
}

pi0::RtcGuidance
rtc_of (const at::Tensor &prefix, int64_t d, int64_t s, double beta, pi0::RtcJacobian j,
        pi0::RtcSchedule sched = pi0::RtcSchedule::Exp)
{
  pi0::RtcGuidance r;
  r.prefix = prefix;
  r.delay = d;
  r.execution_horizon = s;
  r.max_guidance_weight = beta;
  r.jacobian = j;
  r.schedule = sched;
  return r;
}

const pi0::RtcJacobian kModes[] = {pi0::RtcJacobian::Vjp, pi0::RtcJacobian::Identity};

const char *
name_of (pi0::RtcJacobian j)
{
  return j == pi0::RtcJacobian::Vjp ? "vjp" : "identity";
}

bool
all_finite (const at::Tensor &t)
{
  return at::isfinite (t).all ().item<bool> ();
}

} // namespace

/* ---- the mask and the weight, against their formulas written out plainly ---- */

TEST (RtcRules, PrefixWeightsFollowThePaper)
{
  // The paper's Eq. 5 with d = 2, H - s = 6, H = 10: c_i = (H - s - i) / (H - s - d + 1).
  auto lin = pi0::rtc_prefix_weights (2, 6, 10, pi0::RtcSchedule::Linear);
  auto exp = pi0::rtc_prefix_weights (2, 6, 10, pi0::RtcSchedule::Exp);
  for (int i = 0; i < 10; i++) {
    double c = i < 2 ? 1.0 : i < 6 ? (6.0 - i) / 5.0 : 0.0;
    double e = i < 2 ? 1.0 : c * std::expm1 (c) / (M_E - 1.0);
    EXPECT_NEAR (lin[i].item<float> (), c, 1e-7) << "row " << i;
    EXPECT_NEAR (exp[i].item<float> (), e, 1e-7) << "row " << i;
  }
  auto ones = pi0::rtc_prefix_weights (2, 6, 10, pi0::RtcSchedule::Ones);
  auto zeros = pi0::rtc_prefix_weights (2, 6, 10, pi0::RtcSchedule::Zeros);
  EXPECT_EQ (ones.sum ().item<float> (), 6.0f);
  EXPECT_EQ (ones[5].item<float> (), 1.0f);
  EXPECT_EQ (zeros.sum ().item<float> (), 2.0f);
  EXPECT_EQ (zeros[1].item<float> (), 1.0f);
  // The mask's end wins over the delay; an end of 0 is no guidance at all.
  EXPECT_EQ (pi0::rtc_prefix_weights (9, 4, 10, pi0::RtcSchedule::Exp).sum ().item<float> (), 4.0f);
  EXPECT_EQ (pi0::rtc_prefix_weights (3, 0, 10, pi0::RtcSchedule::Ones).sum ().item<float> (),
             0.0f);
  EXPECT_THROW (pi0::rtc_prefix_weights (-1, 4, 10, pi0::RtcSchedule::Exp), pi0::Error);
  EXPECT_THROW (pi0::rtc_prefix_weights (1, 11, 10, pi0::RtcSchedule::Exp), pi0::Error);
}

TEST (RtcRules, GuidanceWeightIsThePaperFormulaAtTauOneMinusT)
{
  for (double beta : {2.5, 5.0, 10.0, 100.0})
    for (int step = 0; step < 10; step++) {
      double t = 1.0 - 0.1 * step, tau = 1.0 - t;
      double r2inv = ((1 - tau) * (1 - tau) + tau * tau) / ((1 - tau) * (1 - tau));
      double expect = step == 0 ? beta : std::min (beta, (1 - tau) / tau * r2inv);
      EXPECT_NEAR (pi0::rtc_guidance_weight (t, beta), expect, 1e-6 * expect)
          << "beta " << beta << " t " << t;
    }
  EXPECT_EQ (pi0::rtc_guidance_weight (1.0, 0.0), 0.0f);
  EXPECT_EQ (pi0::rtc_guidance_weight (0.0, 5.0), 0.0f);
  // Symmetric in tau <-> 1 - tau, smallest (2) at t = 0.5.
  EXPECT_NEAR (pi0::rtc_guidance_weight (0.5, 10.0), 2.0, 1e-6);
  EXPECT_NEAR (pi0::rtc_guidance_weight (0.2, 10.0), pi0::rtc_guidance_weight (0.8, 10.0), 1e-5);
}

/* ---- parity with LeRobot ---- */

namespace
{

/* The goldens of @dir (pi0's or pi0.5's): every case's mask, guidance weights and actions. */
void
check_rtc_goldens (const std::string &dir, const std::vector<const char *> &names)
{
  auto model = pi0::load_pi0_model (dir);
  pi0::TensorMap io = pi0::load_safetensors (dir + "/io.safetensors");
  pi0::TensorMap g = pi0::load_safetensors (dir + "/rtc.safetensors");
  const Batch b = batch_of (golden_input (io));
  c10::InferenceMode guard; // as the Policy runs it: the guided loop must turn autograd back on
  const at::Tensor unguided = plain (*model, b);
  const int64_t h = model->config ().horizon;
  size_t cases = 0;
  for (const char *name : names) {
    SCOPED_TRACE (name);
    const std::string n (name);
    ASSERT_TRUE (g.count (n + ".actions")) << "golden case missing";
    at::Tensor p = g.at (n + ".params");
    const int64_t d = p[0].item<int64_t> (), s = p[1].item<int64_t> (),
                  rows = p[2].item<int64_t> ();
    const auto jac =
        p[3].item<int64_t> () == 0 ? pi0::RtcJacobian::Vjp : pi0::RtcJacobian::Identity;
    const auto sched = static_cast<pi0::RtcSchedule> (p[4].item<int64_t> ());
    const double beta = g.at (n + ".beta").item<double> ();
    const at::Tensor prefix = g.at (n + ".prefix");
    ASSERT_EQ (prefix.size (0), rows);

    // The mask and the per-step weights exactly as LeRobot computed them.
    at::Tensor w = pi0::rtc_prefix_weights (d, std::min (h - s, rows), h, sched);
    EXPECT_TRUE (at::equal (w, g.at (n + ".weights")))
        << "mask max diff " << max_abs (w, g.at (n + ".weights"));
    at::Tensor gw = g.at (n + ".guidance");
    for (int step = 0; step < gw.size (0); step++)
      EXPECT_EQ (pi0::rtc_guidance_weight (1.0 - step / 10.0, beta), gw[step].item<float> ())
          << "step " << step;

    const at::Tensor expect = g.at (n + ".actions").unsqueeze (0);
    at::Tensor ours = guided (*model, b, rtc_of (prefix, d, s, beta, jac, sched));
    const double diff = max_abs (ours, expect);
    EXPECT_LE (diff, 1e-5) << "max |ours - LeRobot|";
    char buf[32];
    std::snprintf (buf, sizeof buf, "%.3g", diff);
    testing::Test::RecordProperty (n + "_max_abs_diff", buf);
    // Not vacuous: guidance moved the actions far from the plain ones, and the other Jacobian
    // mode does not reproduce them.
    EXPECT_GT (max_abs (expect, unguided), 0.5);
    const auto other =
        jac == pi0::RtcJacobian::Vjp ? pi0::RtcJacobian::Identity : pi0::RtcJacobian::Vjp;
    EXPECT_GT (max_abs (guided (*model, b, rtc_of (prefix, d, s, beta, other, sched)), expect),
               1e-3);
    cases++;
  }
  EXPECT_EQ (cases, names.size ());
}

} // namespace

TEST (RtcLeRobotGolden, GuidedActionsMatchLeRobotRtc)
{
  check_rtc_goldens (source_root () + "/tests/parity/lerobot_pi0",
                     {"identity_linear", "identity_exp_clamped", "identity_zeros", "identity_ones",
                      "vjp_exp", "vjp_linear"});
}

/* LeRobot offers RTC for pi0.5 too (policies/rtc/modeling_rtc.py): the same guidance through the
 * adaRMSNorm suffix (tests/parity/make_lerobot_pi05_rtc_golden.py). */
TEST (RtcLeRobotGolden, GuidedPi05ActionsMatchLeRobotRtc)
{
  check_rtc_goldens (source_root () + "/tests/parity/lerobot_pi05",
                     {"identity_linear", "identity_exp_clamped", "vjp_exp", "vjp_linear"});
}

/* ---- properties on pi0-tiny ---- */

class RtcTiny : public testing::Test
{
protected:
  void SetUp () override
  {
    model_ = tiny_model (41);
    b_ = batch_of (tiny_input (model_->config (), 5, 9));
    prefix_ = previous_tail (*model_, b_, 10, 77);
  }
  std::shared_ptr<pi0::Pi0Model> model_;
  Batch b_;
  at::Tensor prefix_;
};

TEST_F (RtcTiny, NoPrefixIsThePlainSampler)
{
  pi0::RtcGuidance none; // prefix undefined
  EXPECT_TRUE (at::equal (guided (*model_, b_, none), plain (*model_, b_)));
}

TEST_F (RtcTiny, ZeroBetaOrAnAllZeroMaskIsUnguided)
{
  const at::Tensor ref = plain (*model_, b_);
  for (auto j : kModes) {
    SCOPED_TRACE (name_of (j));
    // beta = 0: every step's weight is 0, v - 0 * correction = v.
    EXPECT_TRUE (at::equal (guided (*model_, b_, rtc_of (prefix_, 4, 10, 0.0, j)), ref));
    // s = H: the mask ends at row 0; Zeros with d = 0: no row weighs anything.
    EXPECT_TRUE (at::equal (guided (*model_, b_, rtc_of (prefix_, 4, 50, 5.0, j)), ref));
    EXPECT_TRUE (at::equal (
        guided (*model_, b_, rtc_of (prefix_, 0, 10, 5.0, j, pi0::RtcSchedule::Zeros)), ref));
    // ... and any weight does change them (the equalities above are not vacuous).
    EXPECT_GT (max_abs (guided (*model_, b_, rtc_of (prefix_, 4, 10, 5.0, j)), ref), 0.1);
  }
}

TEST_F (RtcTiny, FirstDelayRowsTrackThePrefix)
{
  const int64_t d = 5;
  const at::Tensor ref = plain (*model_, b_);
  const at::Tensor head = prefix_.narrow (1, 0, d);
  const double unguided_err = max_abs (ref.narrow (1, 0, d), head);
  ASSERT_GT (unguided_err, 0.5) << "the previous chunk must disagree with the new one";
  for (auto j : kModes)
    for (double beta : {5.0, 10.0}) {
      SCOPED_TRACE (std::string (name_of (j)) + " beta " + std::to_string (beta));
      at::Tensor a = guided (*model_, b_, rtc_of (prefix_, d, 10, beta, j));
      double err = max_abs (a.narrow (1, 0, d), head);
      EXPECT_LT (err, 0.1 * unguided_err) << "guided " << err << " unguided " << unguided_err;
      EXPECT_TRUE (all_finite (a));
    }
}

TEST_F (RtcTiny, Deterministic)
{
  for (auto j : kModes) {
    auto r = rtc_of (prefix_, 4, 10, 5.0, j);
    EXPECT_TRUE (at::equal (guided (*model_, b_, r), guided (*model_, b_, r))) << name_of (j);
  }
}

TEST_F (RtcTiny, SameUnderInferenceModeAndOutside)
{
  // The Policy calls the model under InferenceMode; the cache is then made of inference tensors,
  // which autograd may not save: the Vjp loop copies them.
  auto r = rtc_of (prefix_, 4, 10, 5.0, pi0::RtcJacobian::Vjp);
  at::Tensor outside = guided (*model_, b_, r);
  at::Tensor inside;
  {
    c10::InferenceMode guard;
    inside = guided (*model_, b_, r);
  }
  EXPECT_TRUE (at::equal (inside, outside));
  at::NoGradGuard no_grad; // and a caller's NoGradGuard does not turn the Jacobian off
  EXPECT_TRUE (at::equal (guided (*model_, b_, r), outside));
}

TEST_F (RtcTiny, BatchRowsAreIndependent)
{
  const at::Tensor prefix2 = previous_tail (*model_, b_, 10, 78);
  Batch two = b_;
  for (at::Tensor *t : {&two.images, &two.masks, &two.tokens, &two.token_mask, &two.state})
    *t = at::cat ({*t, *t});
  two.noise = at::cat ({b_.noise, b_.noise.flip (1)});
  Batch second = b_;
  second.noise = b_.noise.flip (1);
  for (auto j : kModes) {
    SCOPED_TRACE (name_of (j));
    at::Tensor both = guided (*model_, two, rtc_of (at::cat ({prefix_, prefix2}), 4, 10, 5.0, j));
    EXPECT_LT (max_abs (both[0], guided (*model_, b_, rtc_of (prefix_, 4, 10, 5.0, j))[0]), 1e-5);
    EXPECT_LT (max_abs (both[1], guided (*model_, second, rtc_of (prefix2, 4, 10, 5.0, j))[0]),
               1e-5);
    // A [R,A] prefix is shared by the batch.
    at::Tensor shared = guided (*model_, two, rtc_of (prefix_[0], 4, 10, 5.0, j));
    EXPECT_LT (max_abs (shared[0], both[0]), 1e-5);
  }
}

TEST_F (RtcTiny, ShortPrefixIsZeroPaddedAndEndsTheMask)
{
  // A prefix of 40 rows and 32 dims equals the same prefix padded to 50 rows with s = 10; with
  // only the first 20 dims the missing ones are guided toward 0, as LeRobot pads them.
  auto j = pi0::RtcJacobian::Identity;
  at::Tensor padded = at::zeros ({1, 50, 32});
  padded.narrow (1, 0, 40).copy_ (prefix_);
  EXPECT_TRUE (at::equal (guided (*model_, b_, rtc_of (prefix_, 4, 10, 5.0, j)),
                          guided (*model_, b_, rtc_of (padded, 4, 10, 5.0, j))));
  // With s = 0 the mask would reach row 50; the 40-row prefix ends it at 40 instead.
  EXPECT_TRUE (at::equal (guided (*model_, b_, rtc_of (prefix_, 4, 0, 5.0, j)),
                          guided (*model_, b_, rtc_of (prefix_, 4, 10, 5.0, j))));
  at::Tensor narrow_dims = prefix_.narrow (2, 0, 20).clone ();
  at::Tensor padded_dims = at::zeros_like (prefix_);
  padded_dims.narrow (2, 0, 20).copy_ (narrow_dims);
  EXPECT_TRUE (at::equal (guided (*model_, b_, rtc_of (narrow_dims, 4, 10, 5.0, j)),
                          guided (*model_, b_, rtc_of (padded_dims, 4, 10, 5.0, j))));
}

TEST_F (RtcTiny, Bf16AgreesWithFp32)
{
  // bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 2e-3 per operation). Measured here:
  // the plain bf16 sampler is 1.6e-3 (relative to the largest action) from fp32, the guided one
  // 1.6e-3 (Vjp: the backward pass runs in bf16 too) and 2.0e-3 (Identity). Guidance pulls both
  // toward the same fp32 prefix, so it must not amplify the bf16 error: the bound is 5x the
  // measured, half of test_model's plain bf16 bound (2e-2).
  auto bf = tiny_model (41);
  bf->set_precision (at::kCPU, at::kBFloat16);
  const double plain_err = rel_err (plain (*bf, b_), plain (*model_, b_));
  RecordProperty ("plain_bf16_rel_err", std::to_string (plain_err));
  for (auto j : kModes) {
    auto r = rtc_of (prefix_, 4, 10, 5.0, j);
    at::Tensor a32 = guided (*model_, b_, r), a16 = guided (*bf, b_, r);
    EXPECT_EQ (a16.scalar_type (), at::kFloat);
    double e = rel_err (a16, a32);
    EXPECT_LE (e, 1e-2) << name_of (j) << ": plain bf16 vs fp32 is " << plain_err;
    RecordProperty (std::string ("guided_bf16_rel_err_") + name_of (j), std::to_string (e));
  }
}

/* ---- bad input ---- */

TEST_F (RtcTiny, NonFinitePrefixIsAClearErrorAndTouchesNothing)
{
  auto cache =
      model_->prefill (model_->embed_prefix (b_.images, b_.masks, b_.tokens, b_.token_mask));
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN (), std::numeric_limits<float>::infinity ()})
    for (auto j : kModes) {
      at::Tensor p = prefix_.clone ();
      p[0][30][3] = bad; // even on a row the mask ignores
      at::Tensor x = b_.noise.clone ();
      try {
        model_->denoise_loop_guided (cache, b_.state, x, rtc_of (p, 4, 10, 5.0, j));
        ADD_FAILURE () << "a non-finite prefix was accepted (" << name_of (j) << ")";
      } catch (const pi0::Error &e) {
        EXPECT_NE (std::string (e.what ()).find ("non-finite"), std::string::npos) << e.what ();
      }
      EXPECT_TRUE (at::equal (x, b_.noise)) << "x was changed before the error";
    }
}

TEST_F (RtcTiny, NonFiniteFromTheGuidanceReachesTheActions)
{
  // A finite but absurd prefix overflows the correction to infinity inside the loop; the actions
  // must come out non-finite (the sink refuses them), never clamped or zeroed into something
  // that looks valid.
  at::Tensor huge = at::full_like (prefix_, 3e38f);
  for (auto j : kModes) {
    at::Tensor a = guided (*model_, b_, rtc_of (huge, 4, 10, 5.0, j));
    EXPECT_FALSE (all_finite (a)) << name_of (j);
  }
}

TEST_F (RtcTiny, BadParametersAreClearErrors)
{
  auto j = pi0::RtcJacobian::Identity;
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, -1, 10, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, 51, 10, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, 4, -1, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, 4, 51, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, 4, 10, -1.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, 4, 10, std::nan (""), j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (prefix_, 4, 10, INFINITY, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (at::zeros ({1, 51, 32}), 4, 10, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (at::zeros ({1, 40, 33}), 4, 10, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (at::zeros ({3, 40, 32}), 4, 10, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (at::zeros ({40}), 4, 10, 5.0, j)), pi0::Error);
  EXPECT_THROW (guided (*model_, b_, rtc_of (at::zeros ({1, 40, 32}, at::kLong), 4, 10, 5.0, j)),
                pi0::Error);
}

/* ---- the claim itself, on a smooth policy: switches stop jumping ---- */

/* models/pi0-tiny-sines (scripts/train_smooth_tiny.py): a tiny pi0 trained on sines of random
 * phase, so its chunks are smooth and two samples for the same observation are different sines.
 * The robot executes chunk P from row s on; the new chunk takes over at its row d, right after
 * P's row s + d - 1 ran. The switch jump is max over joints |new[d] - P[s + d - 1]|; without
 * RTC it is the gap between two phases, with RTC the new chunk continues P. Median over seeds,
 * both Jacobians, deterministic (seeded noise; no timing). */
TEST (RtcSines, SwitchJumpsAreFiveTimesSmallerOnASmoothPolicy)
{
  const std::string dir = source_root () + "/models/pi0-tiny-sines";
  auto model = pi0::load_pi0_model (dir);
  const int64_t s = 10, d = 5, H = model->config ().horizon;
  auto jump = [&] (const at::Tensor &prev, const at::Tensor &next) {
    return (next.select (1, d) - prev.select (1, s + d - 1)).abs ().max ().item<double> ();
  };
  auto within = [] (const at::Tensor &c) { // largest row-to-row step inside a chunk
    return (c.narrow (1, 1, c.size (1) - 1) - c.narrow (1, 0, c.size (1) - 1))
        .abs ()
        .max ()
        .item<double> ();
  };
  auto median = [] (std::vector<double> v) {
    std::sort (v.begin (), v.end ());
    return v[v.size () / 2];
  };
  std::vector<double> off, vjp, ident, steps;
  for (uint64_t seed = 1; seed <= 9; seed++) {
    Batch b = batch_of (tiny_input (model->config (), 100 + seed));
    auto gen = at::make_generator<at::CPUGeneratorImpl> (1000 + seed);
    Batch first = b;
    first.noise = at::empty (b.noise.sizes ()).normal_ (0, 1, gen);
    const at::Tensor prev = plain (*model, first);
    const at::Tensor prefix = prev.narrow (1, s, H - s).clone ();
    const at::Tensor unguided = plain (*model, b);
    off.push_back (jump (prev, unguided));
    vjp.push_back (
        jump (prev, guided (*model, b, rtc_of (prefix, d, s, 5.0, pi0::RtcJacobian::Vjp))));
    ident.push_back (
        jump (prev, guided (*model, b, rtc_of (prefix, d, s, 10.0, pi0::RtcJacobian::Identity))));
    steps.push_back (std::max (within (prev), within (unguided)));
  }
  const double m_off = median (off), m_vjp = median (vjp), m_id = median (ident);
  const double m_step = median (steps);
  RecordProperty ("switch_jump_off", std::to_string (m_off));
  RecordProperty ("switch_jump_vjp", std::to_string (m_vjp));
  RecordProperty ("switch_jump_identity", std::to_string (m_id));
  RecordProperty ("within_chunk_step", std::to_string (m_step));
  std::printf ("median over 9 seeds: switch jump off %.3f, guided (VJP) %.3f, guided (J = I) "
               "%.3f; largest row-to-row step inside a chunk %.3f\n",
               m_off, m_vjp, m_id, m_step);
  // The premise: a smooth policy whose samples disagree (the jump is many of its own steps).
  EXPECT_GT (m_off, 3.0 * m_step);
  EXPECT_LE (5.0 * m_vjp, m_off);
  EXPECT_LE (5.0 * m_id, m_off);
}
