/* openpi's own pi0.5 PyTorch checkpoint, exactly as openpi's
 * examples/convert_jax_model_to_pytorch.py writes it (a config.json that names no model type,
 * the tied token embedding kept only as lm_head.weight, assets/droid/norm_stats.json), opened by
 * open_policy() with what pi0-serve's pi05_droid preset gives pi0infer (the droid transforms,
 * quantile normalization), against what openpi's own PyTorch policy
 * (policy_config.create_trained_policy, fp32) did with the same raw DROID observation and
 * noise. tests/parity/openpi_converter_golden.py makes both with openpi's code: random full-size
 * weights through openpi's JAX model, its converter and its policy (about 14 GB and half an hour
 * on 2 cores, so by hand: docs/testing.md).
 *
 *   PI0_OPENPI_CHECKPOINT=/tmp/openpi-pi05 build/tests/test_model --gtest_filter='OpenpiConverted*'
 */
#include <cstdlib>
#include <vector>

#include "inference/io/pi0safetensors.h"
#include "inference/io/pi0tokenizer.h"
#include "inference/model/pi0openpolicy.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

TEST (OpenpiConverted, Pi05DroidThroughTheDroidTransformsMatchesOpenpisPolicy)
{
  const char *out = std::getenv ("PI0_OPENPI_CHECKPOINT");
  if (!out)
    GTEST_SKIP () << "by hand only: PI0_OPENPI_CHECKPOINT=OUTDIR of "
                     "tests/parity/openpi_converter_golden.py (a full-size checkpoint)";
  if (!pi0::Tokenizer::available ())
    GTEST_SKIP () << "built without libsentencepiece";
  const std::string dir = std::string (out) + "/pytorch";
  const pi0::TensorMap io = pi0::load_safetensors (std::string (out) + "/pytorch_io.safetensors");

  pi0::OpenOptions o;
  o.device = pi0::DeviceChoice::Cpu;
  o.precision = pi0::PrecisionChoice::Fp32;
  // openpi's golden ran with the test tokenizer in place of PaliGemma's (no network there).
  o.tokenizer = source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
  o.norm_stats = dir + "/assets/droid/norm_stats.json"; // the converter copied openpi's assets
  o.norm_mode = pi0::NormMode::Quantile;                // pi05_droid's preset
  o.transforms = "droid";
  auto policy = pi0::open_policy (dir, o);
  EXPECT_EQ (policy->spec ().model_type, "pi05"); // from the weights' names alone
  EXPECT_TRUE (policy->spec ().state_in_prompt);
  EXPECT_EQ (policy->spec ().horizon, 15); // the converter's config.json: action_horizon
  EXPECT_EQ (policy->action_dims (), 8);

  // The views as openpi's model got them (its client's resize_with_pad to 224, tested against
  // ours elsewhere), in [-1, 1] as openpi makes them: uint8 / 255 * 2 - 1 in float32.
  auto view = [&] (const char *key) {
    return io.at (key).permute ({2, 0, 1}).to (at::kFloat) / 255.0f * 2.0f - 1.0f;
  };
  pi0::Request r;
  r.images = at::stack ({view ("model_image_base_0_rgb"), view ("model_image_left_wrist_0_rgb")});
  ASSERT_FALSE (io.at ("model_image_mask_right_wrist_0_rgb").item<bool> ()); // DROID has two
  r.state = at::cat ({io.at ("joint_position"), io.at ("gripper_position")}).to (at::kFloat);
  r.prompt = "pick up the red block and put it in the bowl";
  r.noise = io.at ("noise");

  // Diagnosis first: openpi's prompt tokens (its normalized state's bins in its prompt) are
  // what our tokenizer makes of the same normalized state.
  const at::Tensor model_state = io.at ("model_state").to (at::kDouble);
  std::vector<double> normalized (8);
  for (int i = 0; i < 8; i++)
    normalized[i] = model_state[i].item<double> ();
  const pi0::Tokens t = policy->tokenizer ().encode_pi05_prompt (
      r.prompt, pi0::Tokenizer::state_bins (normalized), 200);
  EXPECT_TRUE (at::equal (t.ids, io.at ("tokenized_prompt").to (at::kLong)));
  EXPECT_TRUE (at::equal (t.mask, io.at ("tokenized_prompt_mask").to (at::kBool)));

  const at::Tensor ours = policy->infer (r).actions.to (at::kDouble);
  const at::Tensor theirs = io.at ("actions").to (at::kDouble);
  ASSERT_EQ (ours.sizes (), theirs.sizes ());
  const double scale = theirs.abs ().max ().item<double> ();
  const double diff = (ours - theirs).abs ().max ().item<double> ();
  std::printf ("openpi pi05_droid, converted: max |ours - openpi| %.3g at scale %.3g\n", diff,
               scale);
  RecordProperty ("openpi_pi05_droid_max_abs_diff", std::to_string (diff));
  EXPECT_LE (diff, 1e-5 * std::max (1.0, scale));

  // Control: another noise moves the actions far beyond that bound.
  r.noise = io.at ("noise").flip (0);
  EXPECT_GT ((policy->infer (r).actions.to (at::kDouble) - theirs).abs ().max ().item<double> (),
             1e-2 * std::max (1.0, scale));
}
