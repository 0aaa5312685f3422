// Checkpoint loading by name: openpi / LeRobot key conventions, the tied lm_head, dtype
// conversion, and one error that lists every problem.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "inference/io/pi0checkpoint.h"
#include "inference/io/pi0error.h"
#include "inference/io/pi0safetensors.h"
#include "tests/pi0testio.h"

using pi0test::expect_error;

namespace
{

using ModulePtr = std::shared_ptr<torch::nn::Module>;

// Registers `t` under a dotted name, creating the intermediate modules (LibTorch names may not
// contain dots, so "a.b.weight" is module a, module b, parameter weight).
void
add (torch::nn::Module &root, const std::string &dotted, torch::Tensor t, bool buffer = false)
{
  torch::nn::Module *m = &root;
  size_t start = 0, dot;
  while ((dot = dotted.find ('.', start)) != std::string::npos) {
    const std::string part = dotted.substr (start, dot - start);
    auto children = m->named_children ();
    if (auto *child = children.find (part))
      m = child->get ();
    else
      m = m->register_module (part, std::make_shared<torch::nn::Module> ()).get ();
    start = dot + 1;
  }
  if (buffer)
    m->register_buffer (dotted.substr (start), t);
  else
    m->register_parameter (dotted.substr (start), t);
}

const std::string kEmbed =
    "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight";
const std::string kLmHead = "paligemma_with_expert.paligemma.lm_head.weight";
const std::string kExpertLmHead = "paligemma_with_expert.gemma_expert.lm_head.weight";

// A miniature of Pi0's naming: the PaliGemma embedding, a norm, the expert, projections and
// an integer buffer. Values are zero so a load is visible.
ModulePtr
tiny_policy (bool with_lm_head = false, const std::string &prefix = "")
{
  auto m = std::make_shared<torch::nn::Module> ();
  add (*m, prefix + kEmbed, torch::zeros ({16, 4}));
  add (*m, prefix + "paligemma_with_expert.paligemma.model.language_model.norm.weight",
       torch::zeros ({4}));
  add (*m, prefix + "paligemma_with_expert.gemma_expert.model.norm.weight", torch::zeros ({4}));
  add (*m, prefix + "state_proj.weight", torch::zeros ({4, 6}));
  add (*m, prefix + "state_proj.bias", torch::zeros ({4}));
  add (*m, prefix + "step", torch::zeros ({2}, torch::kInt64), /*buffer=*/true);
  if (with_lm_head)
    add (*m, prefix + kLmHead, torch::zeros ({16, 4}));
  return m;
}

// Checkpoint tensors for tiny_policy() with distinct random values.
pi0::TensorMap
tiny_checkpoint (const std::string &prefix = "")
{
  torch::manual_seed (3);
  return {
      {prefix + kEmbed, torch::randn ({16, 4})},
      {prefix + "paligemma_with_expert.paligemma.model.language_model.norm.weight",
       torch::randn ({4})},
      {prefix + "paligemma_with_expert.gemma_expert.model.norm.weight", torch::randn ({4})},
      {prefix + "state_proj.weight", torch::randn ({4, 6})},
      {prefix + "state_proj.bias", torch::randn ({4})},
      {prefix + "step", torch::tensor ({7, 9}, torch::kInt64)},
  };
}

void
expect_loaded (const torch::nn::Module &m, const pi0::TensorMap &ckpt,
               const std::string &ckpt_prefix = "", const std::string &module_prefix = "")
{
  const auto sd = pi0::state_dict (m);
  for (const auto &[name, t] : ckpt) {
    ASSERT_EQ (name.compare (0, ckpt_prefix.size (), ckpt_prefix), 0);
    const std::string mname = module_prefix + name.substr (ckpt_prefix.size ());
    ASSERT_TRUE (sd.count (mname)) << mname;
    EXPECT_TRUE (torch::equal (sd.at (mname), t.to (sd.at (mname).scalar_type ()))) << mname;
  }
}

} // namespace

TEST (Checkpoint, LoadsByExactName)
{
  auto m = tiny_policy ();
  const auto ckpt = tiny_checkpoint ();
  const auto report = pi0::load_state_dict (*m, ckpt, "ckpt");
  EXPECT_EQ (report.loaded, ckpt.size ());
  EXPECT_TRUE (report.tied.empty ());
  EXPECT_TRUE (report.ignored.empty ());
  expect_loaded (*m, ckpt);
}

TEST (Checkpoint, StripsLeRobotModelPrefix)
{
  auto m = tiny_policy ();
  const auto ckpt = tiny_checkpoint ("model."); // LeRobot: PI0Policy.model
  pi0::load_state_dict (*m, ckpt, "lerobot");
  expect_loaded (*m, ckpt, "model.");
}

TEST (Checkpoint, AddsModelPrefixWhenTheModuleHasIt)
{
  auto m = tiny_policy (false, "model.");
  const auto ckpt = tiny_checkpoint ();
  pi0::load_state_dict (*m, ckpt, "openpi");
  expect_loaded (*m, ckpt, "", "model.");
}

TEST (Checkpoint, ConvertsBf16StorageToTheParameterDtype)
{
  auto m = tiny_policy ();
  auto ckpt = tiny_checkpoint ();
  for (auto &[name, t] : ckpt)
    if (t.is_floating_point ())
      t = t.to (torch::kBFloat16);
  pi0::load_state_dict (*m, ckpt, "bf16");
  const auto sd = pi0::state_dict (*m);
  EXPECT_EQ (sd.at ("state_proj.weight").scalar_type (), torch::kFloat32);
  expect_loaded (*m, ckpt);

  // And the other way: an fp32 file into a bf16 module.
  // (Module::to(dtype) would turn the int64 buffer into bf16 too: convert the parameters only.)
  auto b = tiny_policy ();
  for (auto &p : b->parameters ())
    p.set_data (p.data ().to (torch::kBFloat16));
  const auto f32 = tiny_checkpoint ();
  pi0::load_state_dict (*b, f32, "fp32");
  EXPECT_EQ (pi0::state_dict (*b).at ("state_proj.weight").scalar_type (), torch::kBFloat16);
  expect_loaded (*b, f32);
}

TEST (Checkpoint, SafetensorsFileRoundTrip)
{
  pi0test::TempDir dir;
  auto src = tiny_policy (true);
  pi0::load_state_dict (*src, tiny_checkpoint (), "init"); // lm_head tied from the embedding
  pi0::save_safetensors (dir.file ("model.safetensors"), pi0::state_dict (*src));
  auto dst = tiny_policy (true);
  const auto report = pi0::load_checkpoint (*dst, dir.file ("model.safetensors"));
  EXPECT_EQ (report.loaded, 7u);
  expect_loaded (*dst, pi0::state_dict (*src));
  EXPECT_TRUE (
      torch::equal (pi0::state_dict (*dst).at (kLmHead), pi0::state_dict (*dst).at (kEmbed)));
}

TEST (Checkpoint, TiedLmHeadPresentButUnusedIsIgnored)
{
  auto m = tiny_policy ();
  auto ckpt = tiny_checkpoint ();
  ckpt[kLmHead] = ckpt.at (kEmbed).clone ();
  ckpt["model." + kExpertLmHead] =
      torch::randn ({16, 4}); // openpi/LeRobot keep the expert's unused head
  const auto report = pi0::load_state_dict (*m, ckpt, "both");
  EXPECT_EQ (report.ignored, (std::vector<std::string>{"model." + kExpertLmHead, kLmHead}));
  EXPECT_TRUE (report.tied.empty ());
}

TEST (Checkpoint, TiedLmHeadStandsInForAMissingEmbedding)
{
  auto m = tiny_policy ();
  auto ckpt = tiny_checkpoint ("model.");
  const auto embed = ckpt.at ("model." + kEmbed);
  ckpt.erase ("model." + kEmbed);
  ckpt["model." + kLmHead] = embed; // save_model() kept only the lm_head name
  const auto report = pi0::load_state_dict (*m, ckpt, "lm_head only");
  EXPECT_EQ (report.tied, std::vector<std::string>{kEmbed});
  EXPECT_TRUE (report.ignored.empty ());
  EXPECT_TRUE (torch::equal (pi0::state_dict (*m).at (kEmbed), embed));
}

TEST (Checkpoint, MissingLmHeadIsFilledFromTheEmbedding)
{
  auto m = tiny_policy (true);
  const auto ckpt = tiny_checkpoint ();
  const auto report = pi0::load_state_dict (*m, ckpt, "embed only");
  EXPECT_EQ (report.tied, std::vector<std::string>{kLmHead});
  EXPECT_TRUE (torch::equal (pi0::state_dict (*m).at (kLmHead), ckpt.at (kEmbed)));
}

TEST (Checkpoint, OneErrorListsMissingUnexpectedMisShapedAndWrongDtype)
{
  auto m = tiny_policy ();
  const auto before = pi0::state_dict (*m);
  std::map<std::string, torch::Tensor> snapshot;
  for (const auto &[k, v] : before)
    snapshot[k] = v.clone ();

  auto ckpt = tiny_checkpoint ();
  ckpt.erase ("state_proj.bias");
  ckpt.erase ("paligemma_with_expert.gemma_expert.model.norm.weight");
  ckpt["state_proj.weight"] = torch::randn ({4, 5});
  ckpt["action_in_proj.weight"] = torch::randn ({4, 32});
  ckpt["step"] = torch::tensor ({1.5f, 2.5f});
  expect_error ([&] { pi0::load_state_dict (*m, ckpt, "/ckpt/model.safetensors"); },
                {"/ckpt/model.safetensors", "2 missing, 1 unexpected, 1 wrong shape, 1 wrong dtype",
                 "missing: paligemma_with_expert.gemma_expert.model.norm.weight [4]",
                 "missing: state_proj.bias [4]", "unexpected: action_in_proj.weight [4, 32]",
                 "wrong shape: state_proj.weight: model [4, 6], checkpoint [4, 5]",
                 "wrong dtype: step: model Long, checkpoint Float"});
  // Nothing was copied.
  for (const auto &[k, v] : pi0::state_dict (*m))
    EXPECT_TRUE (torch::equal (v, snapshot.at (k))) << k;
}

TEST (Checkpoint, SameTensorWithAndWithoutPrefixIsAnError)
{
  auto m = tiny_policy ();
  auto ckpt = tiny_checkpoint ();
  ckpt["model.state_proj.bias"] = torch::randn ({4});
  expect_error ([&] { pi0::load_state_dict (*m, ckpt, "dup"); },
                {"1 duplicated", "state_proj.bias (given as both"});
}

TEST (Checkpoint, UnrelatedFileSaysNothingMatches)
{
  auto m = tiny_policy ();
  expect_error (
      [&] {
        pi0::load_state_dict (*m, {{"conv1.weight", torch::zeros ({3})}}, "resnet.safetensors");
      },
      {"resnet.safetensors", "no checkpoint name matches a model name", "6 missing"});
}

TEST (Checkpoint, DerivedBuffersNeedNotBeInTheFile)
{
  auto m = tiny_policy ();
  add (*m, "rope.inv_freq", torch::arange (4, torch::kFloat32), true);
  const auto ckpt = tiny_checkpoint ();
  expect_error ([&] { pi0::load_state_dict (*m, ckpt, "f"); }, {"missing: rope.inv_freq [4]"});
  const auto report = pi0::load_state_dict (*m, ckpt, "f", [] (const std::string &n) {
    return n.size () >= 8 && n.compare (n.size () - 8, 8, "inv_freq") == 0;
  });
  EXPECT_EQ (report.loaded, ckpt.size ());
  EXPECT_TRUE (
      torch::equal (pi0::state_dict (*m).at ("rope.inv_freq"), torch::arange (4, torch::kFloat32)));
}

// What openpi's converter really writes: safetensors.torch.save_model() keeps the first name
// (sorted) of a tied pair, so the file has PaliGemma's lm_head and no embedding, plus the
// expert's unused lm_head. LeRobot's files are the same under "model.".
TEST (Checkpoint, LoadsWhatSaveModelWritesForOpenpiAndLeRobot)
{
  PI0_REQUIRE_PYTHON ();
  for (const std::string prefix : {"none", "model"}) {
    SCOPED_TRACE (prefix);
    pi0test::TempDir dir;
    const auto path = dir.file ("model.safetensors");
    std::string out;
    ASSERT_TRUE (pi0test::run_oracle ({"tied-ckpt", path, prefix}, &out)) << out;
    const auto written = nlohmann::json::parse (out);
    const std::string p = prefix == "model" ? "model." : "";
    ASSERT_FALSE (written.contains (p + kEmbed)); // the premise: the embedding's name was dropped
    ASSERT_TRUE (written.contains (p + kLmHead));

    auto m = tiny_policy ();
    const auto report = pi0::load_checkpoint (*m, path);
    EXPECT_EQ (report.loaded, 6u);
    EXPECT_EQ (report.tied, std::vector<std::string>{kEmbed});
    EXPECT_EQ (report.ignored, std::vector<std::string>{p + kExpertLmHead});
    const auto sd = pi0::state_dict (*m);
    const auto embed =
        torch::tensor (written[p + kLmHead].get<std::vector<double>> ()).reshape ({16, 4});
    EXPECT_TRUE (torch::equal (sd.at (kEmbed), embed.to (torch::kFloat32)));
    EXPECT_TRUE (torch::equal (sd.at ("step"), torch::tensor ({7, 9}, torch::kInt64)));
  }
}
