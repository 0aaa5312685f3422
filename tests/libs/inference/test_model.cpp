/* The native Pi0 on the CPU with pi0-tiny: shapes, the mask/position/time rules held directly,
 * cached prefix == full sequence, masked views, seeds, save/load, bad checkpoints, precision. */
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>

#include <c10/core/InferenceMode.h>
#include <torch/script.h>

#include "inference/io/pi0error.h"
#include "inference/io/pi0safetensors.h"
#include "common/pi0json.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

namespace
{

/* fn() throws pi0::Error whose message holds every one of @parts. */
template <typename Fn>
void
expect_error (Fn &&fn, const std::vector<std::string> &parts)
{
  try {
    fn ();
    ADD_FAILURE () << "no error; expected one with: " << parts.front ();
  } catch (const pi0::Error &e) {
    for (const auto &p : parts)
      EXPECT_NE (std::string (e.what ()).find (p), std::string::npos) << e.what ();
  }
}

} // namespace

TEST (ModelConfig, Pi0HasThePublishedParameterCount)
{
  pi0::Pi0Config cfg = pi0::config_by_name ("pi0");
  // The facts file's count (SigLIP+projector 414,803,696; Gemma 2B 2,508,531,712; expert
  // 311,464,960; projections 3,248,160), from the real module tree on the meta device.
  pi0::Pi0Model meta (cfg, at::TensorOptions ().device (at::kMeta));
  EXPECT_EQ (meta.num_parameters (), 3238048528LL);
  auto pc = cfg.param_counts ();
  EXPECT_EQ (pc.vision, 414803696LL);
  EXPECT_EQ (pc.text, 2508531712LL);
  EXPECT_EQ (pc.expert, 311464960LL);
  EXPECT_EQ (pc.heads, 3248160LL);
  EXPECT_EQ (cfg.prefix_len (), 816);
  EXPECT_EQ (cfg.suffix_len (), 51);
}

TEST (ModelConfig, Pi05HasLeRobotsParameterCount)
{
  pi0::Pi0Config cfg = pi0::config_by_name ("pi05");
  // LeRobot 0.6.1's PI05Pytorch on the meta device, lm_heads left out: 3,353,433,872 (gemma
  // expert 427,932,672 with its adaRMSNorm dense layers; action_in/out + time_mlp_in/out).
  pi0::Pi0Model meta (cfg, at::TensorOptions ().device (at::kMeta));
  EXPECT_EQ (meta.num_parameters (), 3353433872LL);
  auto pc = cfg.param_counts ();
  EXPECT_EQ (pc.total (), 3353433872LL);
  EXPECT_EQ (pc.expert, 427932672LL);
  EXPECT_EQ (pc.heads, 2165792LL);
  EXPECT_EQ (pc.vision + pc.text, pi0::config_by_name ("pi0").param_counts ().vision +
                                      pi0::config_by_name ("pi0").param_counts ().text);
  EXPECT_EQ (cfg.max_tokens, 200);
  EXPECT_EQ (cfg.prefix_len (), 968);
  EXPECT_EQ (cfg.suffix_len (), 50); // no state token
  EXPECT_NE (cfg.describe ().find ("model type: pi05"), std::string::npos) << cfg.describe ();
}

TEST (ModelConfig, Pi05KeysTypesAndLayouts)
{
  auto m = std::make_shared<pi0::Pi0Model> (pi0::config_by_name ("pi05-tiny"));
  m->init_random (3);
  EXPECT_EQ (m->num_parameters (), m->config ().param_counts ().total ());
  auto params = m->named_parameters (true);
  for (const char *key : {"time_mlp_in.weight", "time_mlp_out.bias", "action_in_proj.weight",
                          "paligemma_with_expert.gemma_expert.model.layers.1.input_layernorm."
                          "dense.weight",
                          "paligemma_with_expert.gemma_expert.model.layers.0.post_attention_"
                          "layernorm.dense.bias",
                          "paligemma_with_expert.gemma_expert.model.norm.dense.weight",
                          "paligemma_with_expert.paligemma.model.language_model.norm.weight"})
    EXPECT_NE (params.find (key), nullptr) << key;
  for (const char *key : {"state_proj.weight", "action_time_mlp_in.weight",
                          "paligemma_with_expert.gemma_expert.model.norm.weight",
                          "paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm."
                          "weight"})
    EXPECT_EQ (params.find (key), nullptr) << key;
  EXPECT_EQ (params["paligemma_with_expert.gemma_expert.model.norm.dense.weight"].sizes (),
             (std::vector<int64_t>{96, 32}));
  // Non-zero condition layers from init_random (LeRobot zero-initialises them).
  EXPECT_GT (params["paligemma_with_expert.gemma_expert.model.norm.dense.weight"]
                 .abs ()
                 .max ()
                 .item<float> (),
             0.0f);

  // Round trip through our config.json, with and without the state input.
  pi0::Pi0Config c = m->config ();
  c.discrete_state_input = false;
  pi0::Pi0Config back = pi0::config_from_json (c.to_json (), "mem");
  EXPECT_TRUE (back.pi05);
  EXPECT_FALSE (back.discrete_state_input);
  EXPECT_FALSE (back.uses_state ());
  EXPECT_EQ (back.param_counts ().total (), c.param_counts ().total ());
  // LeRobot's PI05Config: type "pi05"; tokenizer_max_length defaults to 200 as LeRobot's does.
  auto lerobot = pi0::config_from_json (R"({"type": "pi05", "chunk_size": 10})", "lerobot");
  EXPECT_TRUE (lerobot.pi05);
  EXPECT_TRUE (lerobot.uses_state ());
  EXPECT_EQ (lerobot.max_tokens, 200);
  EXPECT_EQ (lerobot.horizon, 10);
  // openpi's converter names no type: the weights decide; a declared type must agree with them.
  const char *openpi = R"({"action_dim": 32, "action_horizon": 15, "paligemma_variant": "gemma_2b",
                          "action_expert_variant": "gemma_300m", "precision": "bfloat16"})";
  EXPECT_TRUE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi05).pi05);
  EXPECT_FALSE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi0).pi05);
  EXPECT_FALSE (pi0::config_from_json (openpi, "o").pi05);
  EXPECT_EQ (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi05).horizon, 15);
  // Nor its training config's discrete_state_input (pi05_libero: false): the caller's default
  // applies to such a config.json, for pi0.5 only, and never over one that says or declares.
  EXPECT_TRUE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi05).uses_state ());
  EXPECT_FALSE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi05, false).uses_state ());
  EXPECT_TRUE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi05, true).uses_state ());
  EXPECT_FALSE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi0, false).pi05);
  EXPECT_TRUE (pi0::config_from_json (openpi, "o", pi0::ModelKind::Pi0, false).uses_state ());
  EXPECT_TRUE (pi0::config_from_json (R"({"type": "pi05"})", "l", pi0::ModelKind::Pi05, false)
                   .uses_state ());
  EXPECT_TRUE (pi0::config_from_json (R"({"action_horizon": 10, "discrete_state_input": true})",
                                      "o", pi0::ModelKind::Pi05, false)
                   .uses_state ());
  expect_error ([] { pi0::config_from_json (R"({"type": "pi0"})", "c", pi0::ModelKind::Pi05); },
                {"c says the model is pi0, but the weights are pi05's",
                 "time_mlp_in/out and adaRMSNorm dense layers"});
  expect_error ([] { pi0::config_from_json (R"({"type": "pi0", "pi05": true})", "c"); },
                {"\"pi05\" says pi05, but another key says pi0"});
  expect_error ([] { pi0::config_from_json (R"({"pi05": "yes"})", "c"); },
                {"'pi05' must be true or false"});
  expect_error (
      [] { pi0::config_from_json (R"({"type": "pi0", "discrete_state_input": true})", "c"); },
      {"pi05 setting"});
  expect_error ([] { pi0::config_from_json (R"({"type": "pi0fast"})", "c"); },
                {"neither pi0 nor pi05"});
}

TEST (ModelConfig, TinyModuleMatchesArithmeticAndNames)
{
  auto m = tiny_model ();
  EXPECT_EQ (m->num_parameters (), m->config ().param_counts ().total ());
  auto params = m->named_parameters (true);
  // Checkpoint key names (openpi-PyTorch / LeRobot without "model.").
  for (const char *key :
       {"paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.patch_"
        "embedding.weight",
        "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.position_"
        "embedding.weight",
        "paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.1.self_"
        "attn.out_proj.bias",
        "paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.0.mlp.fc1."
        "weight",
        "paligemma_with_expert.paligemma.model.vision_tower.vision_model.post_layernorm.weight",
        "paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight",
        "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight",
        "paligemma_with_expert.paligemma.model.language_model.layers.1.self_attn.q_proj.weight",
        "paligemma_with_expert.paligemma.model.language_model.layers.0.mlp.gate_proj.weight",
        "paligemma_with_expert.paligemma.model.language_model.layers.0.post_attention_layernorm."
        "weight",
        "paligemma_with_expert.paligemma.model.language_model.norm.weight",
        "paligemma_with_expert.gemma_expert.model.layers.1.self_attn.o_proj.weight",
        "paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.weight",
        "paligemma_with_expert.gemma_expert.model.norm.weight", "action_in_proj.weight",
        "action_out_proj.bias", "state_proj.weight", "action_time_mlp_in.weight",
        "action_time_mlp_out.bias"})
    EXPECT_NE (params.find (key), nullptr) << key;
  EXPECT_EQ (params.find ("paligemma_with_expert.gemma_expert.model.embed_tokens.weight"), nullptr);
  // MQA: one K/V head of head_dim for both experts.
  EXPECT_EQ (
      params["paligemma_with_expert.gemma_expert.model.layers.0.self_attn.k_proj.weight"].sizes (),
      (std::vector<int64_t>{16, 32}));
}

TEST (ModelConfig, JsonRoundTripAndForeignLayouts)
{
  pi0::Pi0Config tiny = pi0::config_by_name ("pi0-tiny");
  tiny.tokenizer = "dir/with \"quote\".model";
  pi0::Pi0Config back = pi0::config_from_json (tiny.to_json (), "mem");
  EXPECT_EQ (back.param_counts ().total (), tiny.param_counts ().total ());
  EXPECT_EQ (back.vision.patch_size, tiny.vision.patch_size);
  EXPECT_EQ (back.text.head_dim, 16);
  EXPECT_EQ (back.tokenizer, tiny.tokenizer);
  EXPECT_EQ (back.name, "pi0-tiny");

  // openpi-PyTorch's converter writes only these keys.
  auto openpi = pi0::config_from_json (
      R"({"action_dim": 32, "action_horizon": 50, "paligemma_variant": "gemma_2b",
          "action_expert_variant": "gemma_300m", "precision": "bfloat16"})",
      "openpi");
  EXPECT_EQ (openpi.param_counts ().total (), 3238048528LL);
  // LeRobot's PI0Config: cameras listed in input_features.
  auto lerobot = pi0::config_from_json (
      R"({"type": "pi0", "chunk_size": 10, "max_state_dim": 32, "max_action_dim": 32,
          "tokenizer_max_length": 48, "image_resolution": [224, 224], "num_inference_steps": 5,
          "input_features": {"observation.images.base_0_rgb": {"type": "VISUAL", "shape": [3,224,224]},
                             "observation.images.left_wrist_0_rgb": {"type": "VISUAL", "shape": [3,224,224]},
                             "observation.state": {"type": "STATE", "shape": [14]}}})",
      "lerobot");
  EXPECT_EQ (lerobot.horizon, 10);
  EXPECT_EQ (lerobot.num_views, 2);
  EXPECT_EQ (lerobot.num_steps, 5);

  EXPECT_THROW (pi0::config_from_json (R"({"type": "pi0fast"})", "x"), pi0::Error);
  EXPECT_TRUE (pi0::config_from_json (R"({"pi05": true})", "x").pi05);
  EXPECT_THROW (pi0::config_from_json (R"({"paligemma_variant": "gemma_7b"})", "x"), pi0::Error);
  EXPECT_THROW (pi0::config_from_json (R"({"chunk_size": -3})", "x"), pi0::Error);
  EXPECT_THROW (pi0::config_from_json (R"({"chunk_size": 5,)", "x"), pi0::Error);
  EXPECT_THROW (pi0::config_from_json (R"({"image_resolution": [224, 200]})", "x"), pi0::Error);
  EXPECT_THROW (pi0::config_by_name ("pi0-huge"), pi0::Error);
  try {
    pi0::config_from_json (R"({"gst_pi0": {"text": {"head_dim": 128}}})", "cfg.json");
    FAIL () << "mismatched expert head dims accepted";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("share attention"), std::string::npos) << e.what ();
  }
}

/* Issue 25: a config.json with depth 1e9 passed validation and the module tree was built from
 * it; image sizes that overflow int ("prefix length: -1179869136") passed too; a FIFO or
 * /dev/zero as config.json blocked or read forever. Every dimension and product is bounded
 * before anything is sized from it. */
TEST (ModelConfig, HostileSizesAndFilesAreRefusedBeforeAnythingIsBuilt)
{
  auto refused = [] (const std::string &json, const std::string &says) {
    try {
      pi0::config_from_json (json, "cfg.json");
      ADD_FAILURE () << json << " accepted";
    } catch (const pi0::Error &e) {
      EXPECT_NE (std::string (e.what ()).find (says), std::string::npos)
          << json << ": " << e.what ();
    }
  };
  refused (R"({"gst_pi0": {"text": {"depth": 1000000000}, "expert": {"depth": 1000000000}}})",
           "Gemma depth is 1000000000, at most 1024");
  refused (R"({"gst_pi0": {"vision": {"image_size": 4096, "patch_size": 1}, "num_views": 64}})",
           "the prefix length (views x patches + tokens) is 1073741872, at most 1048576");
  refused (R"({"image_resolution": [100002, 100002]})",
           "vision image_size is 100002, at most 4096");
  refused (R"({"chunk_size": 1000000})", "horizon is 1000000, at most 65536");
  refused (R"({"gst_pi0": {"vocab_size": 100000000}})", "vocab_size is 100000000");
  refused (R"({"gst_pi0": {"text": {"depth": 1024, "width": 65536},
                           "expert": {"depth": 1024, "width": 65536}}})",
           "parameters, more than the 2^38 this loader accepts");
  /* The describe() text of a valid config never shows a negative length. */
  EXPECT_EQ (pi0::config_by_name ("pi0").describe ().find ("-"), std::string::npos);

  const TempDir dir ("pi0-cfg");
  const std::string fifo = dir.path () + "/config.json";
  ASSERT_EQ (mkfifo (fifo.c_str (), 0600), 0);
  for (const std::string &path : {fifo, std::string ("/dev/zero")}) {
    try {
      pi0::config_from_json_file (path);
      ADD_FAILURE () << path << " accepted";
    } catch (const pi0::Error &e) {
      EXPECT_NE (std::string (e.what ()).find ("cannot read model config " + path + ": is a"),
                 std::string::npos)
          << e.what ();
    }
  }
}

/* Issue 25: the architecture is compared with the file before the module tree is built: a
 * full-size config.json next to pi0-tiny's weights is an error in milliseconds, not 13 GB of
 * parameters. */
TEST (ModelConfig, AConfigFarLargerThanItsWeightsFailsBeforeTheModelIsBuilt)
{
  const TempDir tmp ("pi0-ckpt");
  const std::string &dir = tmp.path ();
  pi0::Pi0Model tiny (pi0::config_by_name ("pi0-tiny"));
  pi0::save_pi0_model (tiny, dir);
  EXPECT_NO_THROW (pi0::load_pi0_model (dir));
  std::ofstream (dir + "/config.json", std::ios::trunc)
      << R"({"type": "pi0", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m"})";
  try {
    pi0::load_pi0_model (dir);
    ADD_FAILURE () << "a 3.2 B-parameter config over pi0-tiny's weights was accepted";
  } catch (const pi0::Error &e) {
    const std::string what = e.what ();
    EXPECT_NE (what.find ("config.json describes 3238048528 parameters, but "), std::string::npos)
        << what;
    EXPECT_NE (what.find ("the config does not belong to these weights"), std::string::npos)
        << what;
  }
}

/* Issue 16: LeRobot's config.json for a policy trained with `empty_cameras: 1` lists
 * observation.images.empty_camera_0 in input_features too (validate_features() adds it before
 * save_pretrained()). LeRobot counts it once; so must we. The file and the count LeRobot itself
 * reads from it were written by the real lerobot (tests/parity/make_lerobot_config.py). */
TEST (ModelConfig, LeRobotSavedEmptyCameraCountsOnceAsLeRobotReadsIt)
{
  const std::string dir = source_root () + "/tests/data/lerobot_config";
  std::string err;
  auto expected = pi0::json::load_strict (dir + "/expected.json", &err);
  ASSERT_TRUE (expected) << err;
  const int lerobot_views = (*expected)["num_views"].get<int> ();
  ASSERT_EQ (lerobot_views, 3) << "two cameras and one empty camera, as LeRobot 0.6.1 counts";

  pi0::Pi0Config c = pi0::config_from_json_file (dir + "/config.json");
  EXPECT_EQ (c.num_views, lerobot_views);
  EXPECT_EQ (c.max_tokens, 48);
  EXPECT_EQ (c.horizon, 50);
  EXPECT_EQ (c.param_counts ().total (), 3238048528LL);

  // An empty camera that the file does not list (a hand-written config) is still a slot.
  auto unlisted = pi0::config_from_json (
      R"({"type": "pi0", "empty_cameras": 1,
          "input_features": {"observation.images.base_0_rgb": {"type": "VISUAL", "shape": [3,224,224]},
                             "observation.state": {"type": "STATE", "shape": [14]}}})",
      "unlisted");
  EXPECT_EQ (unlisted.num_views, 2);
}

/* A config given a key twice is ambiguous: refused, naming the file and the key. */
TEST (ModelConfig, DuplicateKeyIsRefusedNamingIt)
{
  try {
    pi0::config_from_json (R"({"type": "pi0", "chunk_size": 50, "chunk_size": 10})", "cfg.json");
    FAIL () << "duplicate key accepted";
  } catch (const pi0::Error &e) {
    const std::string w = e.what ();
    EXPECT_NE (w.find ("cfg.json"), std::string::npos) << w;
    EXPECT_NE (w.find ("'chunk_size' more than once"), std::string::npos) << w;
  }
  try {
    pi0::config_from_json (R"({"gst_pi0": {"num_views": 3.5}})", "cfg.json");
    FAIL () << "fractional view count accepted";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("'num_views' must be a whole number from 0 to"),
               std::string::npos)
        << e.what ();
  }
  /* Past the bound (2^31 - 1 is an integer, but not one this reader takes): the message says
   * the bound, not "non-negative". */
  try {
    pi0::config_from_json (R"({"type": "pi0", "chunk_size": 2147483647})", "cfg.json");
    FAIL () << "2^31-1 accepted";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find (
                   "'chunk_size' must be a whole number from 0 to 1000000000, found 2147483647"),
               std::string::npos)
        << e.what ();
  }
}

TEST (ModelRules, BlockCausalMaskMatchesTheDefinition)
{
  // 4 prefix tokens (one padding), state, 3 actions.
  at::Tensor pad = (at::tensor ({1, 1, 0, 1, 1, 1, 1, 1}) != 0).unsqueeze (0);
  at::Tensor ar = (at::tensor ({0, 0, 0, 0, 1, 1, 0, 0}) != 0);
  at::Tensor m = pi0::make_attention_mask (pad, ar)[0];
  auto a = m.accessor<bool, 2> ();
  const int prefix = 4, state = 4;
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) {
      bool valid = pad[0][i].item<bool> () && pad[0][j].item<bool> ();
      bool expect;
      if (i < prefix)
        expect = j < prefix; // prefix: bidirectional, never the suffix
      else if (i == state)
        expect = j <= state; // state: prefix + itself, not the actions
      else
        expect = true; // actions: everything, bidirectional among themselves
      EXPECT_EQ (a[i][j], expect && valid) << "query " << i << " key " << j;
    }
  // The suffix's ar pattern: state its own block, actions one block.
  at::Tensor sar = pi0::suffix_ar_mask (3, at::kCPU);
  EXPECT_TRUE (at::equal (sar, (at::tensor ({1, 1, 0, 0}) != 0)));
}

TEST (ModelRules, PositionsSkipPaddingAndRopeIsTheFormula)
{
  at::Tensor pad = (at::tensor ({1, 1, 0, 1, 0, 0, 1}) != 0).unsqueeze (0);
  EXPECT_TRUE (at::equal (pi0::positions_from_mask (pad)[0],
                          at::tensor (std::vector<int64_t>{0, 1, 1, 2, 2, 2, 3})));

  const int64_t d = 8;
  at::Tensor x = at::randn ({1, 2, 3, d}, at::kDouble);
  at::Tensor pos = at::tensor (std::vector<int64_t>{0, 5, 17}).unsqueeze (0);
  at::Tensor r = pi0::apply_rope (x, pos, 10000.0);
  // Direct formula in double: pairs (k, k + d/2) rotated by pos * 10000^(-2k/d).
  for (int64_t h = 0; h < 2; h++)
    for (int64_t n = 0; n < 3; n++)
      for (int64_t k = 0; k < d / 2; k++) {
        double ang = pos[0][n].item<double> () * std::pow (10000.0, -2.0 * k / d);
        double a = x[0][h][n][k].item<double> (), b = x[0][h][n][k + d / 2].item<double> ();
        EXPECT_NEAR (r[0][h][n][k].item<double> (), a * std::cos (ang) - b * std::sin (ang), 1e-5);
        EXPECT_NEAR (r[0][h][n][k + d / 2].item<double> (), b * std::cos (ang) + a * std::sin (ang),
                     1e-5);
      }
}

TEST (ModelRules, PaddingInsideThePrefixDoesNotMoveAnything)
{
  // The same three real tokens, once packed and once with a padding token between them: positions
  // skip the padding, so the actions agree.
  auto m = tiny_model ();
  c10::InferenceMode guard;
  pi0::PolicyInput in = tiny_input (m->config (), 3, 3);
  Batch b = batch_of (in);
  at::Tensor a1 = m->sample_actions (b.images, b.masks, b.tokens, b.token_mask, b.state, b.noise);
  at::Tensor tokens2 = b.tokens.clone (), mask2 = b.token_mask.clone ();
  tokens2[0][1] = 77; // junk under a mask
  tokens2[0][2] = b.tokens[0][1];
  tokens2[0][3] = b.tokens[0][2];
  mask2[0][1] = false;
  mask2[0][3] = true;
  at::Tensor a2 = m->sample_actions (b.images, b.masks, tokens2, mask2, b.state, b.noise);
  EXPECT_LT (max_abs (a1, a2), 1e-5);
  // ... whereas moving a real token does change them (the test above is not vacuous).
  at::Tensor tokens3 = b.tokens.clone ();
  tokens3[0][0] = b.tokens[0][1];
  tokens3[0][1] = b.tokens[0][0];
  at::Tensor a3 = m->sample_actions (b.images, b.masks, tokens3, b.token_mask, b.state, b.noise);
  EXPECT_GT (max_abs (a1, a3), 1e-4);
}

TEST (ModelRules, TimeEmbeddingIsTheSinCosFormula)
{
  const int64_t dim = 32;
  const double lo = 4e-3, hi = 4.0;
  at::Tensor t = at::tensor ({0.0f, 0.3f, 1.0f});
  at::Tensor e = pi0::time_embedding (t, dim, lo, hi);
  ASSERT_EQ (e.sizes (), (std::vector<int64_t>{3, dim}));
  for (int64_t b = 0; b < 3; b++)
    for (int64_t k = 0; k < dim / 2; k++) {
      double period = lo * std::pow (hi / lo, static_cast<double> (k) / (dim / 2 - 1));
      double x = t[b].item<double> () * 2.0 * M_PI / period;
      EXPECT_NEAR (e[b][k].item<double> (), std::sin (x), 1e-6);
      EXPECT_NEAR (e[b][k + dim / 2].item<double> (), std::cos (x), 1e-6);
    }
}

TEST (Model, ShapesOfEveryStage)
{
  auto m = tiny_model ();
  const auto &c = m->config ();
  c10::InferenceMode guard;
  Batch b = batch_of (tiny_input (c, 1));
  auto prefix = m->embed_prefix (b.images, b.masks, b.tokens, b.token_mask);
  EXPECT_EQ (prefix.embeddings.sizes (), (std::vector<int64_t>{1, c.prefix_len (), c.text.width}));
  EXPECT_EQ (prefix.mask.sizes (), (std::vector<int64_t>{1, c.prefix_len ()}));
  auto cache = m->prefill (prefix);
  ASSERT_EQ (static_cast<int> (cache.keys.size ()), c.text.depth);
  EXPECT_EQ (cache.keys[0].sizes (),
             (std::vector<int64_t>{1, c.text.num_kv_heads, c.prefix_len (), c.text.head_dim}));
  at::Tensor suffix = m->embed_suffix (b.state, b.noise, at::full ({1}, 0.5f));
  EXPECT_EQ (suffix.sizes (), (std::vector<int64_t>{1, c.suffix_len (), c.expert.width}));
  at::Tensor v = m->denoise_step (cache, b.state, b.noise, at::full ({1}, 1.0f));
  EXPECT_EQ (v.sizes (), (std::vector<int64_t>{1, c.horizon, c.action_dim}));
  EXPECT_EQ (v.scalar_type (), at::kFloat);

  auto policy = pi0::make_pi0_policy (m, {});
  at::Tensor actions = policy->infer (tiny_input (c, 1));
  EXPECT_EQ (actions.sizes (), (std::vector<int64_t>{c.horizon, c.action_dim}));
  EXPECT_TRUE (at::isfinite (actions).all ().item<bool> ());
  // Batch of two through the model equals two single runs.
  auto in2 = tiny_input (c, 2);
  Batch b2 = batch_of (in2);
  at::Tensor both =
      m->sample_actions (at::cat ({b.images, b2.images}), at::cat ({b.masks, b2.masks}),
                         at::cat ({b.tokens, b2.tokens}), at::cat ({b.token_mask, b2.token_mask}),
                         at::cat ({b.state, b2.state}), at::cat ({b.noise, b2.noise}));
  EXPECT_LT (max_abs (both[1], policy->infer (in2)), 1e-5);
}

TEST (Model, CachedPrefixEqualsFullSequenceForward)
{
  auto m = tiny_model (7);
  c10::InferenceMode guard;
  auto in = tiny_input (m->config (), 11, 9);
  in.image_masks[2] = false; // with a masked view and padded tokens in the prefix
  Batch b = batch_of (in);
  auto prefix = m->embed_prefix (b.images, b.masks, b.tokens, b.token_mask);
  auto cache = m->prefill (prefix);
  for (float t : {1.0f, 0.55f, 0.1f}) {
    at::Tensor tt = at::full ({1}, t);
    at::Tensor cached = m->denoise_step (cache, b.state, b.noise, tt);
    at::Tensor full = m->velocity_full_sequence (prefix, b.state, b.noise, tt);
    EXPECT_LT (rel_err (cached, full), 1e-5) << "t=" << t;
  }
}

/* pi0.5's suffix: no state token, the time through the norms; the cache rule and batching hold
 * for it as for pi0 (the LeRobot goldens are in test_model_parity.cpp). */
TEST (Model, Pi05SuffixCachedPrefixAndBatching)
{
  auto m = std::make_shared<pi0::Pi0Model> (pi0::config_by_name ("pi05-tiny"));
  m->init_random (8);
  const auto &c = m->config ();
  c10::InferenceMode guard;
  auto in = tiny_input (c, 12, 30);
  in.image_masks[1] = false;
  Batch b = batch_of (in);
  at::Tensor suffix = m->embed_suffix (b.state, b.noise, at::full ({1}, 0.5f));
  EXPECT_EQ (suffix.sizes (), (std::vector<int64_t>{1, c.horizon, c.expert.width}));
  EXPECT_EQ (m->time_condition (at::full ({1}, 0.5f)).sizes (),
             (std::vector<int64_t>{1, c.expert.width}));
  auto prefix = m->embed_prefix (b.images, b.masks, b.tokens, b.token_mask);
  auto cache = m->prefill (prefix);
  for (float t : {1.0f, 0.4f}) {
    at::Tensor tt = at::full ({1}, t);
    at::Tensor cached = m->denoise_step (cache, b.state, b.noise, tt);
    EXPECT_EQ (cached.sizes (), (std::vector<int64_t>{1, c.horizon, c.action_dim}));
    EXPECT_LT (rel_err (cached, m->velocity_full_sequence (prefix, b.state, b.noise, tt)), 1e-5);
    // The state tensor is not an input of pi0.5's suffix.
    EXPECT_TRUE (at::equal (cached, m->denoise_step (cache, b.state * 0 + 3, b.noise, tt)));
  }
  // The time reaches the velocity only through the condition: t changes it.
  EXPECT_GT (max_abs (m->denoise_step (cache, b.state, b.noise, at::full ({1}, 0.9f)),
                      m->denoise_step (cache, b.state, b.noise, at::full ({1}, 0.2f))),
             1e-4);
  auto policy = pi0::make_pi0_policy (m, {});
  auto in2 = tiny_input (c, 13, 20);
  const std::vector<at::Tensor> both = policy->infer_batch ({in, in2});
  EXPECT_LT (max_abs (both[0], policy->infer (in)), 1e-5);
  EXPECT_LT (max_abs (both[1], policy->infer (in2)), 1e-5);
  EXPECT_NE (policy->describe ().find ("pi05 native (pi05-tiny)"), std::string::npos)
      << policy->describe ();
  EXPECT_TRUE (policy->spec ().state_in_prompt);
}

TEST (ModelCheckpoint, Pi05SaveLoadAndTheWeightsDecideForOpenpisConfig)
{
  auto m = std::make_shared<pi0::Pi0Model> (pi0::config_by_name ("pi05-tiny"));
  m->init_random (9);
  TempDir dir;
  pi0::save_pi0_model (*m, dir.path ());
  auto in = tiny_input (m->config (), 4);
  const at::Tensor expect = pi0::make_pi0_policy (m, {})->infer (in);
  EXPECT_TRUE (at::equal (pi0::load_policy (dir.path (), {})->infer (in), expect));
  // Our config.json without its type keys: what openpi's converter leaves out.
  pi0::TensorMap t = pi0::load_safetensors (dir.path () + "/model.safetensors");
  EXPECT_EQ (pi0::model_kind_of (t), pi0::ModelKind::Pi05);
  std::string json = m->config ().to_json ();
  for (const char *k : {"  \"type\": \"pi05\",\n", "  \"pi05\": true,\n", "\"pi05\": true, ",
                        "  \"discrete_state_input\": true,\n"}) {
    auto at = json.find (k);
    if (at != std::string::npos)
      json.erase (at, std::strlen (k));
  }
  ASSERT_EQ (json.find ("pi05\": true"), std::string::npos) << json;
  ASSERT_EQ (json.find ("discrete_state_input"), std::string::npos) << json;
  std::ofstream (dir.path () + "/config.json", std::ios::trunc) << json;
  auto loaded = pi0::load_pi0_model (dir.path ());
  EXPECT_TRUE (loaded->config ().pi05);
  EXPECT_TRUE (loaded->config ().discrete_state_input);
  EXPECT_TRUE (at::equal (pi0::make_pi0_policy (loaded, {})->infer (in), expect));
  // What openpi's training config says of the state prompt, which that file cannot.
  EXPECT_FALSE (pi0::load_pi0_model (dir.path (), 0, false)->config ().discrete_state_input);
  // A pi0 config over these weights is refused naming both sides.
  pi0::Pi0Config as_pi0 = m->config ();
  as_pi0.pi05 = false;
  std::ofstream (dir.path () + "/config.json", std::ios::trunc) << as_pi0.to_json ();
  try {
    pi0::load_pi0_model (dir.path ());
    ADD_FAILURE () << "loaded pi05 weights as pi0";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("says the model is pi0, but the weights are pi05's"),
               std::string::npos)
        << e.what ();
  }
}

TEST (Model, Pi0TokenLayoutAtFullLength)
{
  // pi0's sequence geometry (224 px / patch 14 = 256 tokens per view, 816 prefix tokens, 8 heads
  // of 256 with one K/V head) with narrow widths so that it runs in a second on a CPU.
  pi0::Pi0Config c = pi0::config_by_name ("pi0");
  c.name = "pi0-narrow";
  c.vision.width = 32;
  c.vision.depth = 1;
  c.vision.mlp_dim = 32;
  c.vision.num_heads = 2;
  c.text = pi0::GemmaConfig{64, 1, 64, 8, 1, 256};
  c.expert = pi0::GemmaConfig{32, 1, 32, 8, 1, 256};
  c.vocab_size = 1024;
  auto m = std::make_shared<pi0::Pi0Model> (c);
  m->init_random (17);
  c10::InferenceMode guard;
  auto in = tiny_input (c, 2, 20);
  in.image_masks[1] = false;
  Batch b = batch_of (in);
  auto prefix = m->embed_prefix (b.images, b.masks, b.tokens, b.token_mask);
  ASSERT_EQ (prefix.embeddings.size (1), 816);
  EXPECT_EQ (prefix.mask.sum ().item<int64_t> (), 2 * 256 + 20);
  auto cache = m->prefill (prefix);
  EXPECT_EQ (cache.keys[0].sizes (), (std::vector<int64_t>{1, 1, 816, 256}));
  at::Tensor t = at::full ({1}, 0.7f);
  EXPECT_LT (rel_err (m->denoise_step (cache, b.state, b.noise, t),
                      m->velocity_full_sequence (prefix, b.state, b.noise, t)),
             1e-5);
  at::Tensor x = b.noise.clone ();
  m->denoise_loop (cache, b.state, x);
  EXPECT_EQ (x.sizes (), (std::vector<int64_t>{1, 50, 32}));
  EXPECT_TRUE (at::isfinite (x).all ().item<bool> ());
}

TEST (Model, TenEulerStepsFromOneToZero)
{
  auto m = tiny_model (5);
  c10::InferenceMode guard;
  Batch b = batch_of (tiny_input (m->config (), 5));
  auto cache = m->prefill (m->embed_prefix (b.images, b.masks, b.tokens, b.token_mask));
  at::Tensor x = b.noise.clone ();
  for (int k = 0; k < 10; k++) {
    at::Tensor t = at::full ({1}, static_cast<float> (1.0 - 0.1 * k));
    x = x - 0.1 * m->denoise_step (cache, b.state, x, t);
  }
  at::Tensor y = m->sample_actions (b.images, b.masks, b.tokens, b.token_mask, b.state, b.noise);
  EXPECT_LT (max_abs (x, y), 1e-5);
}

TEST (Model, MaskedCameraContentDoesNotChangeActions)
{
  auto m = tiny_model (2);
  auto policy = pi0::make_pi0_policy (m, {});
  auto in = tiny_input (m->config (), 4);
  in.image_masks[1] = false;
  at::Tensor a = policy->infer (in);
  auto in2 = in;
  in2.images = in.images.clone ();
  in2.images[1].uniform_ (-1, 1); // other content in the masked slot
  at::Tensor b = policy->infer (in2);
  EXPECT_TRUE (at::equal (a, b)) << "max diff " << max_abs (a, b);
  // The same change in a valid slot does change the actions.
  auto in3 = in;
  in3.images = in.images.clone ();
  in3.images[0].uniform_ (-1, 1);
  EXPECT_GT (max_abs (a, policy->infer (in3)), 1e-4);
}

TEST (Model, SeedGivesBitwiseIdenticalActions)
{
  auto m = tiny_model (9);
  auto policy = pi0::make_pi0_policy (m, {});
  auto in = tiny_input (m->config (), 8);
  in.noise = at::Tensor ();
  in.seed = 1234;
  at::Tensor a = policy->infer (in), b = policy->infer (in);
  EXPECT_TRUE (at::equal (a, b));
  // The seed drives the noise exactly as noise_from_seed does.
  auto explicit_in = in;
  explicit_in.noise = pi0::noise_from_seed (1234, m->config ().horizon, m->config ().action_dim);
  EXPECT_TRUE (at::equal (a, policy->infer (explicit_in)));
  in.seed = 1235;
  EXPECT_GT (max_abs (a, policy->infer (in)), 1e-3);
  // And the same seed builds the same weights.
  auto m2 = tiny_model (9);
  auto p2 = pi0::make_pi0_policy (m2, {});
  in.seed = 1234;
  EXPECT_TRUE (at::equal (a, p2->infer (in)));
}

TEST (Model, WarmupChangesNothing)
{
  auto cold = pi0::make_pi0_policy (tiny_model (41), {});
  auto warm = pi0::make_pi0_policy (tiny_model (41), {});
  warm->warmup ();
  auto in = tiny_input (pi0::config_by_name ("pi0-tiny"), 2);
  EXPECT_TRUE (at::equal (cold->infer (in), warm->infer (in)));
}

TEST (Model, SdpaPathAgreesWithEagerPath)
{
  auto m = tiny_model (3);
  c10::InferenceMode guard;
  auto in = tiny_input (m->config (), 6, 5);
  in.image_masks[0] = false;
  Batch b = batch_of (in);
  at::Tensor eager =
      m->sample_actions (b.images, b.masks, b.tokens, b.token_mask, b.state, b.noise);
  m->set_attention_impl (pi0::AttentionImpl::Sdpa);
  at::Tensor sdpa = m->sample_actions (b.images, b.masks, b.tokens, b.token_mask, b.state, b.noise);
  EXPECT_LT (rel_err (sdpa, eager), 1e-5);
}

TEST (Model, Bf16KeepsNormsInFp32AndStaysClose)
{
  auto m32 = tiny_model (4);
  auto m16 = tiny_model (4);
  auto in = tiny_input (m32->config (), 12);
  at::Tensor ref = pi0::make_pi0_policy (m32, {})->infer (in);
  pi0::PolicyOptions o;
  o.dtype = at::kBFloat16;
  auto p16 = pi0::make_pi0_policy (m16, o);
  auto params = m16->named_parameters (true);
  EXPECT_EQ (
      params
          ["paligemma_with_expert.paligemma.model.language_model.layers.0.self_attn.q_proj.weight"]
              .scalar_type (),
      at::kBFloat16);
  EXPECT_EQ (
      params["paligemma_with_expert.paligemma.model.language_model.layers.0.input_layernorm.weight"]
          .scalar_type (),
      at::kFloat);
  EXPECT_EQ (params["paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings."
                    "patch_embedding.weight"]
                 .scalar_type (),
             at::kFloat);
  EXPECT_EQ (params["action_time_mlp_in.weight"].scalar_type (), at::kFloat);
  at::Tensor a16 = p16->infer (in);
  EXPECT_EQ (a16.scalar_type (), at::kFloat);
  // The issue's bf16 bound (measured here: ~1.5e-3), with the CPU's explicit fp32 softmax and
  // with the SDPA attention that the CUDA path uses.
  EXPECT_LT (rel_err (a16, ref), 2e-2);
  m16->set_attention_impl (pi0::AttentionImpl::Sdpa);
  EXPECT_LT (rel_err (p16->infer (in), ref), 2e-2);
}

/* pi0.5 under bf16: the condition layers (`…layernorm.dense`) stay fp32 with the norms, as
 * LeRobot keeps its norms, and the time MLP with the projections. */
TEST (Model, Pi05Bf16KeepsTheConditionLayersInFp32AndStaysClose)
{
  auto make = [] {
    auto m = std::make_shared<pi0::Pi0Model> (pi0::config_by_name ("pi05-tiny"));
    m->init_random (5);
    return m;
  };
  auto m32 = make (), m16 = make ();
  auto in = tiny_input (m32->config (), 14, 40);
  const at::Tensor ref = pi0::make_pi0_policy (m32, {})->infer (in);
  pi0::PolicyOptions o;
  o.dtype = at::kBFloat16;
  auto p16 = pi0::make_pi0_policy (m16, o);
  auto params = m16->named_parameters (true);
  EXPECT_EQ (
      params["paligemma_with_expert.gemma_expert.model.layers.0.mlp.up_proj.weight"].scalar_type (),
      at::kBFloat16);
  for (const char *k : {"paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.dense."
                        "weight",
                        "paligemma_with_expert.gemma_expert.model.norm.dense.bias",
                        "time_mlp_in.weight", "time_mlp_out.bias"})
    EXPECT_EQ (params[k].scalar_type (), at::kFloat) << k;
  const at::Tensor a16 = p16->infer (in);
  EXPECT_LT (rel_err (a16, ref), 2e-2);
  m16->set_attention_impl (pi0::AttentionImpl::Sdpa);
  EXPECT_LT (rel_err (p16->infer (in), ref), 2e-2);
}

TEST (Model, Fp16IsRefusedWithAReason)
{
  auto m = tiny_model ();
  pi0::PolicyOptions o;
  o.dtype = at::kHalf;
  try {
    pi0::make_pi0_policy (m, o);
    FAIL () << "fp16 accepted";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("float16"), std::string::npos);
  }
  EXPECT_THROW (pi0::parse_dtype ("fp16"), pi0::Error);
  EXPECT_THROW (pi0::parse_dtype ("int8"), pi0::Error);
  EXPECT_EQ (pi0::parse_dtype ("bf16"), at::kBFloat16);
  EXPECT_THROW (pi0::parse_device ("tpu"), pi0::Error);
}

TEST (Model, BadInputsAreRejectedBeforeRunning)
{
  auto m = tiny_model ();
  auto policy = pi0::make_pi0_policy (m, {});
  const auto &c = m->config ();
  auto expect_error = [&] (pi0::PolicyInput in, const char *needle) {
    try {
      at::Tensor out = policy->infer (in);
      ADD_FAILURE () << "accepted input that should fail with '" << needle << "', produced "
                     << out.sizes ();
    } catch (const pi0::Error &e) {
      EXPECT_NE (std::string (e.what ()).find (needle), std::string::npos) << e.what ();
    }
  };
  auto good = tiny_input (c, 1);
  auto in = good;
  in.images = good.images.narrow (0, 0, 2);
  expect_error (in, "views");
  in = good;
  in.images = at::zeros ({3, 3, 16, 16});
  expect_error (in, "32x32");
  in = good;
  in.tokens = good.tokens.clone ();
  in.tokens[0] = c.vocab_size;
  expect_error (in, "out of range");
  in = good;
  in.token_mask = good.token_mask.narrow (0, 0, 10);
  expect_error (in, "token_mask");
  in = good;
  in.state = at::zeros ({c.state_dim + 1});
  expect_error (in, "at most");
  in = good;
  in.noise = at::zeros ({c.horizon, 7});
  expect_error (in, "noise");
  in = good;
  in.image_masks = at::ones ({2}, at::kBool);
  expect_error (in, "image_masks");
  // A short state is zero-padded (openpi pads to 32): same as padding by hand.
  in = good;
  in.state = good.state.narrow (0, 0, 14).clone ();
  auto padded = good;
  padded.state = at::cat ({in.state, at::zeros ({c.state_dim - 14})});
  EXPECT_TRUE (at::equal (policy->infer (in), policy->infer (padded)));
}

TEST (ModelCheckpoint, SaveLoadRoundTrip)
{
  TempDir dir;
  auto m = tiny_model (21);
  pi0::save_pi0_model (*m, dir.path ());
  auto loaded = pi0::load_pi0_model (dir.path ());
  auto a = m->named_parameters (true), b = loaded->named_parameters (true);
  ASSERT_EQ (a.size (), b.size ());
  for (const auto &p : a)
    EXPECT_TRUE (at::equal (p.value (), b[p.key ()])) << p.key ();
  auto in = tiny_input (m->config (), 3);
  EXPECT_TRUE (at::equal (pi0::make_pi0_policy (m, {})->infer (in),
                          pi0::load_policy (dir.path (), {})->infer (in)));
  // The file alone (config.json next to it) works as well.
  EXPECT_NO_THROW (pi0::load_pi0_model (dir.path () + "/model.safetensors"));
}

TEST (ModelCheckpoint, LeRobotPrefixedKeysLoad)
{
  TempDir dir;
  auto m = tiny_model (22);
  pi0::TensorMap t;
  for (const auto &p : m->named_parameters (true))
    t["model." + p.key ()] = p.value ();
  pi0::save_safetensors (dir.path () + "/model.safetensors", t);
  std::ofstream (dir.path () + "/config.json") << m->config ().to_json ();
  auto loaded = pi0::load_pi0_model (dir.path ());
  EXPECT_TRUE (at::equal (loaded->state_proj->weight, m->state_proj->weight));
}

TEST (ModelCheckpoint, ModelLevelBadCheckpoints)
{
  auto m = tiny_model (23);
  auto expect_error = [] (const std::string &path, const char *needle) {
    try {
      pi0::load_pi0_model (path);
      ADD_FAILURE () << "loaded " << path;
    } catch (const pi0::Error &e) {
      EXPECT_NE (std::string (e.what ()).find (needle), std::string::npos) << e.what ();
    }
  };
  {
    TempDir dir; // nothing there
    expect_error (dir.path (), "no checkpoint");
  }
  {
    TempDir dir; // weights without config.json
    pi0::save_pi0_model (*m, dir.path ());
    std::remove ((dir.path () + "/config.json").c_str ());
    expect_error (dir.path (), "config.json");
  }
  {
    TempDir dir; // config.json describing another architecture: every tensor mis-shaped
    pi0::save_pi0_model (*m, dir.path ());
    pi0::Pi0Config other = m->config ();
    other.text.width = 48;
    std::ofstream (dir.path () + "/config.json", std::ios::trunc) << other.to_json ();
    expect_error (dir.path (), "language_model.layers.0.self_attn.q_proj.weight");
  }
  {
    TempDir dir; // a config.json of another model type
    pi0::save_pi0_model (*m, dir.path ());
    std::ofstream (dir.path () + "/config.json", std::ios::trunc) << R"({"type": "pi05"})";
    expect_error (dir.path (), "says the model is pi05, but the weights are pi0's");
  }
  {
    TempDir dir; // a missing tensor is named
    pi0::TensorMap t;
    for (const auto &p : m->named_parameters (true))
      if (p.key () != "action_out_proj.bias")
        t[p.key ()] = p.value ();
    pi0::save_safetensors (dir.path () + "/model.safetensors", t);
    std::ofstream (dir.path () + "/config.json") << m->config ().to_json ();
    expect_error (dir.path (), "action_out_proj.bias");
  }
}

TEST (TorchScriptBackend, RunsAModuleWithTheDocumentedSignature)
{
  TempDir dir;
  const std::string path = dir.path () + "/policy.pt";
  {
    // The module is defined here: actions = noise * 0.5 + mean(valid images) + state[0].
    torch::jit::Module mod ("Pi0Export");
    mod.register_attribute ("horizon", c10::IntType::get (), 50);
    mod.register_attribute ("action_dim", c10::IntType::get (), 32);
    mod.register_attribute ("num_views", c10::IntType::get (), 3);
    mod.register_attribute ("state_dim", c10::IntType::get (), 32);
    mod.define (R"JIT(
def forward(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
            state: Tensor, noise: Tensor) -> Tensor:
    w = image_masks.float().view(1, -1, 1, 1, 1)
    img = (images * w).sum() / (w.sum() * images[0, 0].numel())
    n_tok = token_mask.float().sum()
    return noise * 0.5 + img + state[:, 0].view(1, 1, 1) + 0.0 * n_tok
)JIT");
    mod.save (path);
  }
  auto policy = pi0::load_policy (path, {});
  EXPECT_EQ (policy->spec ().horizon, 50);
  auto in = tiny_input (pi0::config_by_name ("pi0-tiny"), 5);
  in.image_masks[2] = false;
  at::Tensor got = policy->infer (in);
  at::Tensor expect = in.noise * 0.5 + in.images.narrow (0, 0, 2).mean () + in.state[0];
  EXPECT_LT (max_abs (got, expect), 1e-5);
  // Inputs that contradict the declared attributes are refused before the call.
  auto bad = in;
  bad.images = in.images.narrow (0, 0, 2);
  EXPECT_THROW (policy->infer (bad), pi0::Error);
}

TEST (TorchScriptBackend, RefusesModulesWithoutTheContract)
{
  TempDir dir;
  {
    torch::jit::Module mod ("NoAttrs");
    mod.define ("def forward(self, a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: "
                "Tensor) -> Tensor:\n"
                "    return f\n");
    mod.save (dir.path () + "/noattrs.pt");
  }
  try {
    pi0::load_torchscript_policy (dir.path () + "/noattrs.pt", {});
    FAIL () << "module without horizon accepted";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("horizon"), std::string::npos) << e.what ();
  }
  {
    torch::jit::Module mod ("WrongShape");
    mod.register_attribute ("horizon", c10::IntType::get (), 50);
    mod.register_attribute ("action_dim", c10::IntType::get (), 32);
    mod.define ("def forward(self, a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: "
                "Tensor) -> Tensor:\n"
                "    return f[:, :10]\n");
    mod.save (dir.path () + "/wrong.pt");
  }
  auto p = pi0::load_torchscript_policy (dir.path () + "/wrong.pt", {});
  try {
    p->infer (tiny_input (pi0::config_by_name ("pi0-tiny"), 1));
    FAIL () << "wrong output shape accepted";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("expected [1,50,32]"), std::string::npos) << e.what ();
  }
  EXPECT_THROW (pi0::load_torchscript_policy (dir.path () + "/missing.pt", {}), pi0::Error);
}
