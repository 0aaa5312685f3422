/* pi0::open_policy(): the URI forms, the tokenizer and norm stats it finds, the errors and
 * their kinds, batches of requests with their own options, and the warm-up that makes a broken
 * policy fail before the first observation. */
#include <fstream>

#include <sys/stat.h>

#include <torch/script.h>

#include "inference/io/pi0error.h"
#include "inference/io/pi0tokenizer.h"
#include "inference/model/pi0openpolicy.h"
#include "tests/pi0testmodel.h"

using namespace pi0test;

namespace
{

#define PI0_REQUIRE_SENTENCEPIECE()                                                                \
  do {                                                                                             \
    if (!pi0::Tokenizer::available ())                                                             \
      GTEST_SKIP () << "built without libsentencepiece";                                           \
  } while (0)

std::string
tokenizer_dir ()
{
  return source_root () + "/tests/data/tokenizer";
}

pi0::OpenOptions
cpu_options ()
{
  pi0::OpenOptions o;
  o.device = pi0::DeviceChoice::Cpu;
  o.data_dirs = {tokenizer_dir ()};
  return o;
}

/* open_policy() throws an OpenError of @kind whose message holds every one of @parts. */
void
expect_open_error (const std::string &uri, const pi0::OpenOptions &o, pi0::OpenError::Kind kind,
                   const std::vector<std::string> &parts)
{
  SCOPED_TRACE (uri);
  try {
    pi0::open_policy (uri, o);
    ADD_FAILURE () << "opened";
  } catch (const pi0::OpenError &e) {
    EXPECT_EQ (static_cast<int> (e.kind ()), static_cast<int> (kind)) << e.what ();
    for (const auto &p : parts)
      EXPECT_NE (std::string (e.what ()).find (p), std::string::npos)
          << "'" << p << "' not in: " << e.what ();
  }
}

/* A TorchScript policy declaring horizon 10, action_dim 8 and the attributes in @declared; its
 * forward raises (an impossible view) whatever it is given when @always_raises, else returns
 * state[0] everywhere. */
std::string
scripted (const std::string &path, const std::vector<std::pair<const char *, int>> &declared,
          bool always_raises)
{
  torch::jit::Module mod ("Scripted");
  mod.register_attribute ("horizon", c10::IntType::get (), 10);
  mod.register_attribute ("action_dim", c10::IntType::get (), 8);
  for (const auto &[name, value] : declared)
    mod.register_attribute (name, c10::IntType::get (), value);
  mod.define (std::string (R"JIT(
def forward(self, images: Tensor, image_masks: Tensor, tokens: Tensor, token_mask: Tensor,
            state: Tensor, noise: Tensor) -> Tensor:
    out = noise * 0.0 + state[:, 0].view(1, 1, 1)
)JIT") + (always_raises ? "    out = out.view(7, -1)\n" : "") +
              "    return out\n");
  mod.save (path);
  return path;
}

pi0::Request
request (uint64_t seed, const std::string &prompt, float state0, int views = 3)
{
  pi0::Request r;
  auto gen = at::make_generator<at::CPUGeneratorImpl> (seed + 1000);
  r.images = at::empty ({views, 3, 32, 32}).uniform_ (-1, 1, gen);
  r.image_masks = at::ones ({views}, at::kBool);
  r.state = at::zeros ({7});
  r.state[0] = state0;
  r.prompt = prompt;
  r.seed = seed;
  return r;
}

} // namespace

TEST (OpenPolicy, BuiltinTinyFindsTheBundledTokenizerAndSaysItIsUntrained)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  auto p = pi0::open_policy ("builtin:pi0-tiny", cpu_options ());
  EXPECT_TRUE (p->untrained ());
  EXPECT_NE (p->model_id ().find ("builtin:pi0-tiny"), std::string::npos) << p->model_id ();
  EXPECT_NE (p->model_id ().find ("untrained"), std::string::npos) << p->model_id ();
  EXPECT_EQ (p->tokenizer ().path (), tokenizer_dir () + "/tiny_paligemma.model");
  EXPECT_EQ (p->spec ().num_views, 3);
  EXPECT_EQ (p->action_dims (), 32);
  EXPECT_EQ (p->prompt_length (), 48);
  EXPECT_FALSE (p->has_norm_stats ());
  EXPECT_TRUE (p->device ().is_cpu ());
  EXPECT_TRUE (p->warmup ());

  pi0::Response r = p->infer (request (1, "pick up the cube", 0.1f));
  EXPECT_EQ (r.actions.sizes (), (std::vector<int64_t>{50, 32}));
  EXPECT_EQ (r.actions.scalar_type (), at::kFloat);
  EXPECT_TRUE (r.actions.isfinite ().all ().item<bool> ());
  EXPECT_FALSE (r.prompt_truncated);
}

/* Issue 14's shape: one call, several requests, each with its own prompt, seed and state; each
 * gets exactly what it gets alone. */
TEST (OpenPolicy, EachRequestOfABatchGetsWhatItGetsAlone)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  pi0::OpenOptions o = cpu_options ();
  o.action_dims = 7;
  auto p = pi0::open_policy ("builtin:pi0-tiny", o);
  std::vector<pi0::Request> batch = {request (1, "pick up the cube", 0.1f),
                                     request (2, "open the drawer", -0.3f),
                                     request (1, "open the drawer", 0.1f)};
  std::vector<pi0::Response> together = p->infer (batch);
  ASSERT_EQ (together.size (), 3u);
  for (size_t i = 0; i < batch.size (); i++) {
    pi0::Response alone = p->infer (batch[i]);
    EXPECT_EQ (together[i].actions.sizes (), (std::vector<int64_t>{50, 7}));
    EXPECT_TRUE (at::equal (together[i].actions, alone.actions)) << i;
  }
  EXPECT_FALSE (at::equal (together[0].actions, together[1].actions));
  EXPECT_FALSE (at::equal (together[0].actions, together[2].actions)) << "the prompt matters";
  EXPECT_TRUE (p->infer (std::vector<pi0::Request>{}).empty ());
}

/* The largest |a - b| relative to the larger magnitude (at least 1). */
static double
max_rel_diff (const at::Tensor &a, const at::Tensor &b)
{
  const double scale =
      std::max (1.0, std::max (a.abs ().max ().item<double> (), b.abs ().max ().item<double> ()));
  return (a - b).abs ().max ().item<double> () / scale;
}

/* The native backend stacks a batch into one forward pass (Policy::infer_batch). A stacked GEMM
 * may sum in another order than the batch-1 one, so "what it gets alone" holds up to fp32
 * rounding: 1e-5 relative is issue 14's bound and ~100 ulps of fp32 at the actions' magnitude,
 * far below any difference a prompt, seed, state or view makes (checked below as well). */
TEST (OpenPolicy, ABatchOfFourDifferentRequestsRunsStackedAndEachGetsItsAloneChunk)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  pi0::OpenOptions o = cpu_options ();
  o.action_dims = 7;
  auto p = pi0::open_policy ("builtin:pi0-tiny", o);
  std::string essay;
  for (int i = 0; i < 60; i++)
    essay += "then stack the blocks ";
  std::vector<pi0::Request> batch = {request (1, "pick up the cube", 0.1f),
                                     request (2, "open the drawer", -0.3f, 2), // a masked slot
                                     request (7, essay, 0.5f),                 // truncated
                                     request (4, "", -0.9f)};
  std::vector<pi0::Response> together = p->infer (batch);
  ASSERT_EQ (together.size (), 4u);
  EXPECT_TRUE (together[2].prompt_truncated);
  EXPECT_FALSE (together[0].prompt_truncated);
  for (size_t i = 0; i < batch.size (); i++) {
    pi0::Response alone = p->infer (batch[i]);
    ASSERT_EQ (together[i].actions.sizes (), alone.actions.sizes ());
    EXPECT_TRUE (together[i].actions.isfinite ().all ().item<bool> ());
    EXPECT_LE (max_rel_diff (together[i].actions, alone.actions), 1e-5) << i;
    for (size_t j = 0; j < i; j++) // not vacuous: the requests' chunks differ by far more
      EXPECT_GT (max_rel_diff (together[i].actions, together[j].actions), 1e-2) << i << " " << j;
  }
}

/* Guided requests (real-time chunking) share a forward pass when their settings match; an
 * unguided one and one with another delay in the same call still get their alone-chunks. */
TEST (OpenPolicy, GuidedAndUnguidedRequestsInOneBatchEachGetTheirAloneChunk)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  pi0::OpenOptions o = cpu_options ();
  o.action_dims = 7;
  auto p = pi0::open_policy ("builtin:pi0-tiny", o);
  auto guided = [&] (uint64_t seed, float state0, int64_t delay, bool identity) {
    pi0::Request r = request (seed, "pick up the cube", state0);
    auto gen = at::make_generator<at::CPUGeneratorImpl> (seed + 77);
    r.guidance.prefix = at::empty ({40, 7}).uniform_ (-1, 1, gen);
    r.guidance.delay = delay;
    r.guidance.execution_horizon = 10;
    r.guidance.max_guidance_weight = 5.0;
    r.guidance.identity_jacobian = identity;
    return r;
  };
  std::vector<pi0::Request> batch = {guided (1, 0.1f, 5, false),  request (2, "open it", -0.3f),
                                     guided (3, -0.2f, 5, false), guided (4, 0.4f, 3, false),
                                     guided (5, 0.7f, 5, true),   guided (6, 0.2f, 5, true)};
  std::vector<pi0::Response> together = p->infer (batch);
  ASSERT_EQ (together.size (), batch.size ());
  for (size_t i = 0; i < batch.size (); i++) {
    pi0::Response alone = p->infer (batch[i]);
    EXPECT_TRUE (together[i].actions.isfinite ().all ().item<bool> ());
    EXPECT_LE (max_rel_diff (together[i].actions, alone.actions), 1e-5) << i;
  }
  pi0::Request plain = batch[0];
  plain.guidance = pi0::PolicyGuidance{};
  EXPECT_GT (max_rel_diff (p->infer (plain).actions, together[0].actions), 1e-3)
      << "the guidance mattered";
}

/* One bad request fails the whole call before anything runs, naming what is wrong. */
TEST (OpenPolicy, ABadRequestInABatchFailsTheCallWithItsReason)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  auto p = pi0::open_policy ("builtin:pi0-tiny", cpu_options ());
  pi0::Request bad = request (2, "x", 0.f);
  bad.images = at::zeros ({3, 3, 16, 16});
  try {
    p->infer (std::vector<pi0::Request>{request (1, "x", 0.f), bad});
    ADD_FAILURE () << "a 16x16 view ran";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("32x32"), std::string::npos) << e.what ();
  }
}

TEST (OpenPolicy, FewerViewsThanSlotsAreMaskedSlotsAndLongPromptsAreFlagged)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  auto p = pi0::open_policy ("builtin:pi0-tiny", cpu_options ());
  pi0::Request two = request (3, "x", 0.f, 2);
  pi0::Request three = request (3, "x", 0.f, 3);
  three.images.narrow (0, 0, 2).copy_ (two.images);
  three.image_masks[2] = false;
  EXPECT_TRUE (at::equal (p->infer (two).actions, p->infer (three).actions));

  std::string essay;
  for (int i = 0; i < 60; i++)
    essay += "then stack the blocks ";
  EXPECT_TRUE (p->infer (request (3, essay, 0.f)).prompt_truncated);
}

TEST (OpenPolicy, NormStatsAndActionDimsGiveRobotUnits)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  TempDir dir;
  std::ofstream (dir.path () + "/norm_stats.json")
      << R"({"norm_stats": {"state": {"mean": [0, 0, 0, 0, 0, 0, 0], "std": [1, 1, 1, 1, 1, 1, 1]},
                            "actions": {"mean": [10, 20, 30], "std": [2, 2, 2]}}})";
  pi0::OpenOptions o = cpu_options ();
  o.action_dims = 3;
  auto raw = pi0::open_policy ("builtin:pi0-tiny", o);
  o.norm_stats = dir.path ();
  auto norm = pi0::open_policy ("builtin:pi0-tiny", o);
  EXPECT_TRUE (norm->has_norm_stats ());
  at::Tensor a = raw->infer (request (4, "x", 0.f)).actions;
  at::Tensor b = norm->infer (request (4, "x", 0.f)).actions;
  ASSERT_EQ (b.sizes (), (std::vector<int64_t>{50, 3}));
  at::Tensor expect =
      a.to (at::kDouble) * (2.0 + 1e-6) + at::tensor ({10.0, 20.0, 30.0}, at::kDouble);
  EXPECT_LT (max_abs (b, expect), 1e-4);
}

TEST (OpenPolicy, CheckpointDirectoryAndItsTokenizer)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  TempDir dir;
  pi0::Pi0Config cfg = pi0::config_by_name ("pi0-tiny");
  cfg.tokenizer = tokenizer_dir () + "/tiny_paligemma.model"; // absolute: used as is
  auto model = std::make_shared<pi0::Pi0Model> (cfg);
  model->init_random (5);
  pi0::save_pi0_model (*model, dir.path () + "/ck");
  pi0::OpenOptions o = cpu_options ();
  o.data_dirs.clear ();
  for (const std::string &uri : {dir.path () + "/ck", dir.path () + "/ck/model.safetensors"}) {
    auto p = pi0::open_policy (uri, o);
    EXPECT_EQ (p->model_id (), uri);
    EXPECT_FALSE (p->untrained ());
    EXPECT_EQ (p->tokenizer ().path (), cfg.tokenizer);
  }
  o.num_steps = 3; // replaces the checkpoint's 10: different actions
  EXPECT_FALSE (at::equal (
      pi0::open_policy (dir.path () + "/ck", o)->infer (request (1, "x", 0)).actions,
      pi0::open_policy (dir.path () + "/ck", cpu_options ())->infer (request (1, "x", 0)).actions));

  // Issue 16: the tokenizer the checkpoint names is a directory: an error, not an abort.
  cfg.tokenizer = "tok.model";
  pi0::Pi0Model other (cfg);
  other.init_random (6);
  pi0::save_pi0_model (other, dir.path () + "/ck2");
  ASSERT_EQ (::mkdir ((dir.path () + "/ck2/tok.model").c_str (), 0755), 0);
  expect_open_error (
      dir.path () + "/ck2", o, pi0::OpenError::Kind::Unreadable,
      {"Could not load tokenizer", dir.path () + "/ck2/tok.model", "is a directory"});
}

TEST (OpenPolicy, EachFailureHasItsKindAndAMessageNamingTheCulprit)
{
  using K = pi0::OpenError::Kind;
  TempDir dir;
  const pi0::OpenOptions o = cpu_options ();
  expect_open_error ("", o, K::Settings, {"No model"});
  expect_open_error ("builtin:pi0-huge", o, K::NotFound,
                     {"the builtins are builtin:pi0-tiny, builtin:pi0, builtin:pi05-tiny and "
                      "builtin:pi05"});
  expect_open_error (dir.path () + "/nothing", o, K::NotFound, {dir.path () + "/nothing"});
  std::ofstream (dir.path () + "/weights.bin") << "x";
  expect_open_error (dir.path () + "/weights.bin", o, K::Settings, {"neither a checkpoint"});
  ASSERT_EQ (::mkdir ((dir.path () + "/bad").c_str (), 0755), 0);
  std::ofstream (dir.path () + "/bad/config.json") << R"({"type": "pi0"})";
  std::ofstream (dir.path () + "/bad/model.safetensors") << "not a safetensors file";
  expect_open_error (dir.path () + "/bad", o, K::Unreadable,
                     {"Could not load model", "model.safetensors"});
  // A TorchScript policy has no tokenizer of its own.
  const std::string pt = scripted (dir.path () + "/p.pt", {}, false);
  expect_open_error (pt, o, K::Settings, {"No tokenizer", pt});
  pi0::OpenOptions t = o;
  t.tokenizer = dir.path (); // issue 16: a directory
  if (pi0::Tokenizer::available ())
    expect_open_error (pt, t, K::Unreadable, {"Could not load tokenizer", "is a directory"});
  t.tokenizer = dir.path () + "/none.model";
  expect_open_error (pt, t, K::Unreadable, {dir.path () + "/none.model"});
  if (!pi0::Tokenizer::available ())
    return;
  pi0::OpenOptions a = o;
  a.action_dims = 33;
  expect_open_error ("builtin:pi0-tiny", a, K::Settings, {"action-dims=33", "only makes 32"});
  pi0::OpenOptions n = o;
  n.norm_stats = dir.path () + "/absent.json";
  expect_open_error ("builtin:pi0-tiny", n, K::Unreadable, {"norm stats", "absent.json"});
  std::ofstream (dir.path () + "/huge.json")
      << R"({"norm_stats": {"state": {"mean": [1e39], "std": [1]}, "actions": {"mean": [0], "std": [1]}}})";
  n.norm_stats = dir.path () + "/huge.json";
  expect_open_error ("builtin:pi0-tiny", n, K::Unreadable, {"huge.json", "\"mean\"[0]"});
}

/* Issue 17: a TorchScript policy that always raises must fail at start, not on the first frame.
 * The warm-up runs it whenever the input sizes are known before the stream: num_views,
 * image_size and state_dim declared (the prompt length is the caller's when the module does not
 * declare max_tokens). */
TEST (OpenPolicy, WarmupRunsABrokenTorchScriptPolicyWhenItsSizesAreKnown)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  TempDir dir;
  pi0::OpenOptions o = cpu_options ();
  o.tokenizer = tokenizer_dir () + "/tiny_paligemma.model";
  const std::vector<std::pair<const char *, int>> sizes = {
      {"num_views", 3}, {"image_size", 32}, {"state_dim", 7}};

  auto broken = pi0::open_policy (scripted (dir.path () + "/broken.pt", sizes, true), o);
  EXPECT_THROW (broken->warmup (), pi0::Error);

  auto fine = pi0::open_policy (scripted (dir.path () + "/fine.pt", sizes, false), o);
  EXPECT_TRUE (fine->warmup ());
  EXPECT_EQ (fine->prompt_length (), 48);
  EXPECT_FLOAT_EQ (fine->infer (request (1, "x", 0.25f)).actions[3][5].item<float> (), 0.25f);

  // Without the sizes nothing can be run before the first observation: said, not guessed.
  auto unknown = pi0::open_policy (scripted (dir.path () + "/unknown.pt", {}, true), o);
  EXPECT_FALSE (unknown->warmup ());
  EXPECT_THROW (unknown->infer (request (1, "x", 0.f)), pi0::Error);
}

/* builtin:pi05-tiny through open_policy: the normalized state reaches the model only as prompt
 * bins, so a change inside one bin changes nothing and a change of one bin changes the chunk;
 * a pi0.5 request without a state is refused, not sent with a made-up one. */
TEST (OpenPolicy, Pi05PutsTheStateIntoThePromptAsBins)
{
  PI0_REQUIRE_SENTENCEPIECE ();
  auto p = pi0::open_policy ("builtin:pi05-tiny", cpu_options ());
  EXPECT_EQ (p->prompt_length (), 200);
  EXPECT_TRUE (p->spec ().state_in_prompt);
  EXPECT_EQ (p->spec ().model_type, "pi05");
  EXPECT_NE (p->describe ().find ("pi05 native"), std::string::npos) << p->describe ();
  EXPECT_TRUE (p->warmup ());
  // Bin 128 holds [0, 1/128): 0.001 and 0.006 share it, 0.01 is the next one.
  const at::Tensor a = p->infer (request (5, "pick up the cube", 0.001f)).actions;
  EXPECT_EQ (a.sizes (), (std::vector<int64_t>{50, 32}));
  EXPECT_TRUE (at::equal (p->infer (request (5, "pick up the cube", 0.006f)).actions, a));
  EXPECT_GT (max_abs (p->infer (request (5, "pick up the cube", 0.01f)).actions, a), 1e-4);
  EXPECT_GT (max_abs (p->infer (request (5, "put down the cube", 0.001f)).actions, a), 1e-4);
  // A batch: each request its own prompt and state, as alone.
  auto batch =
      p->infer ({request (5, "pick up the cube", 0.01f), request (5, "pick up the cube", 0.001f)});
  EXPECT_LT (max_abs (batch[1].actions, a), 1e-5);
  pi0::Request none = request (5, "pick up the cube", 0.0f);
  none.state = at::Tensor ();
  try {
    p->infer (none);
    ADD_FAILURE () << "a pi05 request without a state ran";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("reads the robot state through its prompt"),
               std::string::npos)
        << e.what ();
  }
  pi0::Request nan = request (5, "pick up the cube", std::nanf (""));
  EXPECT_THROW (p->infer (nan), pi0::Error);
  // With transforms, whose missing state is zeros for pi0: still refused for pi0.5.
  pi0::OpenOptions o = cpu_options ();
  o.transforms = "droid";
  auto with_transforms = pi0::open_policy ("builtin:pi05-tiny", o);
  try {
    with_transforms->infer (none);
    ADD_FAILURE () << "a pi05 request without a state ran with transforms";
  } catch (const pi0::Error &e) {
    EXPECT_NE (std::string (e.what ()).find ("reads the robot state through its prompt"),
               std::string::npos)
        << e.what ();
  }
}
