/* Parity with implementations nobody here wrote.
 *  - transformers (live, every run): tests/parity/transformers_parity.py builds SiglipVisionModel
 *    and GemmaModel in pi0-tiny's dimensions with seeded random weights and writes weights, inputs
 *    and hidden states; we load the same weights by name and compare every hidden state (fp32).
 *  - LeRobot (committed goldens, tests/parity/lerobot_pi0/, made by make_lerobot_golden.py): the
 *    whole policy's actions and the prefix KV cache. */
#include <fstream>

#include <c10/core/InferenceMode.h>

#include "inference/io/pi0checkpoint.h"
#include "inference/io/pi0safetensors.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

namespace
{

const std::string kVisionPrefix =
    "paligemma_with_expert.paligemma.model.vision_tower.vision_model.";
const std::string kTextPrefix = "paligemma_with_expert.paligemma.model.language_model.";
const std::string kExpertPrefix = "paligemma_with_expert.gemma_expert.model.";

/* Runs the Python oracle once for the whole test binary. */
class TransformersParity : public testing::Test
{
protected:
  static void SetUpTestSuite ()
  {
    dir_ = new TempDir ();
    const std::string py = venv_python ();
    std::string cmd = "'" + py + "' '" + source_root () +
                      "/tests/parity/transformers_parity.py' '" + dir_->path () + "' > '" +
                      dir_->path () + "/log.txt' 2>&1";
    status_ = std::system (cmd.c_str ());
    std::ifstream log (dir_->path () + "/log.txt");
    std::stringstream ss;
    ss << log.rdbuf ();
    log_ = ss.str ();
  }
  static void TearDownTestSuite ()
  {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp () override
  {
    ASSERT_EQ (status_, 0)
        << "the transformers oracle failed (needs .venv with torch, transformers, safetensors; "
           "scripts/setup.sh):\n"
        << log_;
  }

  /* Copies the oracle's "w.<name>" tensors into `model` under `prefix` + name; returns how many. */
  static size_t load_weights (pi0::Pi0Model &model, const pi0::TensorMap &t,
                              const std::string &prefix, std::vector<std::string> *unmapped)
  {
    pi0::TensorMap sd = pi0::state_dict (model);
    size_t n = 0;
    c10::InferenceMode off (false);
    at::NoGradGuard no_grad;
    for (const auto &kv : t) {
      if (kv.first.rfind ("w.", 0) != 0)
        continue;
      std::string name = prefix + kv.first.substr (2);
      auto it = sd.find (name);
      if (it == sd.end ()) {
        unmapped->push_back (kv.first);
        continue;
      }
      EXPECT_EQ (it->second.sizes (), kv.second.sizes ()) << name;
      it->second.copy_ (kv.second);
      n++;
    }
    return n;
  }

  static size_t count_with_prefix (pi0::Pi0Model &model, const std::string &prefix)
  {
    size_t n = 0;
    for (const auto &p : model.named_parameters (true))
      n += p.key ().rfind (prefix, 0) == 0;
    return n;
  }

  static TempDir *dir_;
  static int status_;
  static std::string log_;
};

TempDir *TransformersParity::dir_ = nullptr;
int TransformersParity::status_ = -1;
std::string TransformersParity::log_;

void
expect_close (const at::Tensor &ours, const at::Tensor &theirs, const std::string &what,
              double tol = 1e-4)
{
  ASSERT_EQ (ours.sizes (), theirs.sizes ()) << what;
  double e = rel_err (ours, theirs);
  EXPECT_LE (e, tol) << what << ": relative error " << e;
  char buf[32];
  std::snprintf (buf, sizeof buf, "%.3g", e);
  testing::Test::RecordProperty (what, buf);
}

} // namespace

TEST_F (TransformersParity, SiglipVisionTowerMatchesSiglipVisionModel)
{
  auto model = tiny_model (1);
  pi0::TensorMap t = pi0::load_safetensors (dir_->path () + "/siglip.safetensors");
  std::vector<std::string> unmapped;
  size_t n = load_weights (*model, t, kVisionPrefix, &unmapped);
  EXPECT_TRUE (unmapped.empty ()) << "transformers weights with no counterpart, first: "
                                  << unmapped[0];
  EXPECT_EQ (n, count_with_prefix (*model, kVisionPrefix))
      << "some of our vision weights were not set";
  c10::InferenceMode guard;
  std::vector<at::Tensor> hs;
  at::Tensor last = model->vision_tower ().forward (t.at ("in.pixels"), &hs);
  for (size_t i = 0; i < hs.size (); i++)
    expect_close (hs[i], t.at ("out.hidden." + std::to_string (i)),
                  "siglip hidden " + std::to_string (i));
  expect_close (last, t.at ("out.last"), "siglip last_hidden_state");
}

TEST_F (TransformersParity, PrefixGemmaLayersMatchGemmaModel)
{
  auto model = tiny_model (1);
  pi0::TensorMap t = pi0::load_safetensors (dir_->path () + "/gemma_prefix.safetensors");
  std::vector<std::string> unmapped;
  size_t n = load_weights (*model, t, kTextPrefix, &unmapped);
  EXPECT_TRUE (unmapped.empty ());
  EXPECT_EQ (n, count_with_prefix (*model, kTextPrefix));
  c10::InferenceMode guard;
  at::Tensor ids = t.at ("in.input_ids");
  const int64_t b = ids.size (0), len = ids.size (1);
  // The text embedding with its sqrt(width) scale against transformers' scaled embedding.
  at::Tensor x = model->embed_tokens (ids);
  expect_close (x, t.at ("out.hidden.0"), "gemma embeddings (sqrt(width) scaled)");
  // GemmaModel's default attention is causal with positions 0..N-1.
  at::Tensor pad = at::ones ({b, len}, at::kBool);
  at::Tensor mask = pi0::make_attention_mask (pad, at::ones ({len}, at::kBool));
  auto hs = model->gemma_hidden_states (0, x, mask, pi0::positions_from_mask (pad));
  const int depth = model->config ().text.depth;
  for (int i = 1; i < depth; i++)
    expect_close (hs[i], t.at ("out.hidden." + std::to_string (i)),
                  "gemma prefix layer " + std::to_string (i));
  expect_close (hs.back (), t.at ("out.last"), "gemma prefix final norm");
}

TEST_F (TransformersParity, ActionExpertGemmaLayersMatchGemmaModel)
{
  auto model = tiny_model (1);
  pi0::TensorMap t = pi0::load_safetensors (dir_->path () + "/gemma_expert.safetensors");
  t.erase ("w.embed_tokens.weight"); // the action expert has no token embedding
  std::vector<std::string> unmapped;
  size_t n = load_weights (*model, t, kExpertPrefix, &unmapped);
  EXPECT_TRUE (unmapped.empty ());
  EXPECT_EQ (n, count_with_prefix (*model, kExpertPrefix));
  c10::InferenceMode guard;
  at::Tensor x = t.at ("in.inputs_embeds");
  const int64_t b = x.size (0), len = x.size (1);
  at::Tensor pad = at::ones ({b, len}, at::kBool);
  at::Tensor mask = pi0::make_attention_mask (pad, at::ones ({len}, at::kBool));
  auto hs = model->gemma_hidden_states (1, x, mask, pi0::positions_from_mask (pad));
  const int depth = model->config ().expert.depth;
  for (int i = 0; i < depth; i++)
    expect_close (hs[i], t.at ("out.hidden." + std::to_string (i)),
                  "gemma expert layer " + std::to_string (i));
  expect_close (hs.back (), t.at ("out.last"), "gemma expert final norm");
}

/* LeRobot 0.6.1's PI0Pytorch (see tests/parity/make_lerobot_golden.py for how and where the
 * goldens were made). The checkpoint is loaded through the normal path: LeRobot's "model."
 * key prefix, config.json next to it. */
TEST (LeRobotGolden, ActionsAndPrefixCacheMatch)
{
  const std::string dir = source_root () + "/tests/parity/lerobot_pi0";
  auto model = pi0::load_pi0_model (dir);
  pi0::TensorMap io = pi0::load_safetensors (dir + "/io.safetensors");
  pi0::PolicyInput in = golden_input (io);
  ASSERT_FALSE (in.image_masks[2].item<bool> ()) << "the golden masks its third camera";

  {
    c10::InferenceMode guard;
    auto prefix = model->embed_prefix (in.images.unsqueeze (0), in.image_masks.unsqueeze (0),
                                       in.tokens.unsqueeze (0), in.token_mask.unsqueeze (0));
    auto cache = model->prefill (prefix);
    ASSERT_EQ (static_cast<int> (cache.keys.size ()), model->config ().text.depth);
    for (size_t l = 0; l < cache.keys.size (); l++) {
      for (const char *kind : {"k", "v"}) {
        const at::Tensor &ours = kind[0] == 'k' ? cache.keys[l] : cache.values[l];
        const at::Tensor &theirs = io.at (std::string ("kv.") + kind + "." + std::to_string (l));
        ASSERT_EQ (ours.sizes (), theirs.sizes ());
        // Only the valid prefix tokens are read by anyone; padding rows are compared too since
        // both implementations compute them the same way.
        EXPECT_TRUE (at::allclose (ours, theirs, 1e-4, 1e-4))
            << "layer " << l << " " << kind << " max diff " << max_abs (ours, theirs);
      }
    }
  }

  auto policy = pi0::make_pi0_policy (model, {});
  at::Tensor actions = policy->infer (in);
  const at::Tensor &expect = io.at ("actions");
  // LeRobot's own tolerance against openpi for sample_actions (fp32).
  EXPECT_TRUE (at::allclose (actions, expect, 1e-2, 5e-3))
      << "max diff " << max_abs (actions, expect);
  RecordProperty ("lerobot_actions_max_abs_diff", std::to_string (max_abs (actions, expect)));
  // Not vacuous: the goldens are not reproduced by other noise.
  pi0::PolicyInput other = in;
  other.noise = in.noise.flip (0);
  EXPECT_FALSE (at::allclose (policy->infer (other), expect, 1e-2, 5e-3));
}

/* LeRobot 0.6.1's PI05Pytorch (tests/parity/make_lerobot_pi05_golden.py): pi0.5's suffix (no
 * state token, adaRMSNorm time conditioning with non-zero condition layers, a 10-row chunk) from
 * the same checkpoint loaded through the normal path. Controls: one token changed, and the
 * condition layers zeroed, each reproduced and each moving the actions. */
TEST (LeRobotGolden, Pi05ActionsMatchWithTheTimeConditioningAndControls)
{
  const std::string dir = source_root () + "/tests/parity/lerobot_pi05";
  auto model = pi0::load_pi0_model (dir);
  ASSERT_TRUE (model->config ().pi05);
  ASSERT_EQ (model->config ().horizon, 10);
  ASSERT_EQ (model->config ().suffix_len (), 10);
  pi0::TensorMap io = pi0::load_safetensors (dir + "/io.safetensors");
  ASSERT_FALSE (io.count ("state")) << "pi0.5's model reads no state tensor (it is in the prompt)";
  pi0::PolicyInput in = golden_input (io);
  auto policy = pi0::make_pi0_policy (model, {});
  const at::Tensor actions = policy->infer (in);
  const at::Tensor &expect = io.at ("actions");
  EXPECT_LE (max_abs (actions, expect), 1e-5) << "max diff " << max_abs (actions, expect);
  RecordProperty ("lerobot_pi05_actions_max_abs_diff", std::to_string (max_abs (actions, expect)));
  // The state tensor does not reach pi0.5's actions.
  pi0::PolicyInput with_state = in;
  with_state.state = at::ones ({32});
  EXPECT_TRUE (at::equal (policy->infer (with_state), actions));

  pi0::PolicyInput changed = in;
  changed.tokens = io.at ("tokens_changed");
  const at::Tensor a_token = policy->infer (changed);
  EXPECT_LE (max_abs (a_token, io.at ("actions_token_changed")), 1e-5);
  EXPECT_GT (max_abs (a_token, expect), 1e-3) << "one token must move the actions";

  {
    at::NoGradGuard no_grad;
    for (auto &p : model->named_parameters ())
      if (p.key ().find (".dense.") != std::string::npos)
        p.value ().zero_ ();
  }
  const at::Tensor a_plain = policy->infer (in);
  EXPECT_LE (max_abs (a_plain, io.at ("actions_dense_zeroed")), 1e-5);
  EXPECT_GT (max_abs (a_plain, expect), 1e-3) << "the time conditioning must move the actions";
}
