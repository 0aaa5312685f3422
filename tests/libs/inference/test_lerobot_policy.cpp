/* LeRobot pi0 and pi0.5 checkpoints exactly as LeRobot saves them (save_pretrained of the policy
 * and of its pre/post-processor pipelines), opened by open_policy() as a user would (the
 * directory alone), against what LeRobot 0.6.1 itself does with the same raw observation:
 * tests/parity/lerobot_processor_parity.py, run live with .lerobot-venv's Python (in CI; elsewhere
 * the tests skip without it). Raw observation -> actions in robot units, within 1e-5 of the
 * actions' scale. */
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "common/pi0json.h"
#include "inference/io/pi0normstats.h"
#include "inference/io/pi0safetensors.h"
#include "inference/model/pi0openpolicy.h"
#include "tests/pi0testmodel.h"
#include "tests/pi0testrun.h"

using namespace pi0test;

namespace
{

/* Runs the maker for @kind and @size into a fresh directory; the directory, or "" on failure
 * (with the log in *log). */
std::string
make_checkpoint (const TempDir &dir, const std::string &kind, const std::string &size,
                 std::string *log)
{
  const std::string out = dir.path () + "/" + kind + "-" + size;
  // One thread beside the other tests; the full size runs by hand, alone, on every core.
  const std::string threads = size == "full" ? "" : "OMP_NUM_THREADS=1 ";
  const std::string cmd = threads + "PYTHONPATH='" + source_root () + "/tests/parity' '" +
                          lerobot_python () + "' '" + source_root () +
                          "/tests/parity/lerobot_processor_parity.py' '" + out + "' " + kind + " " +
                          size + " > '" + out + ".log' 2>&1";
  const int status = std::system (cmd.c_str ());
  std::ifstream f (out + ".log");
  std::stringstream ss;
  ss << f.rdbuf ();
  *log = ss.str ();
  return status == 0 ? out : std::string ();
}

/* One LeRobot checkpoint of each kind for the whole binary (LeRobot's import alone takes tens of
 * seconds). */
const std::string &
checkpoint (const std::string &kind, const std::string &size)
{
  static TempDir *tmp = new TempDir ();
  static std::map<std::string, std::string> made;
  const std::string key = kind + "-" + size;
  if (!made.count (key)) {
    std::string log;
    made[key] = make_checkpoint (*tmp, kind, size, &log);
    if (made[key].empty ())
      ADD_FAILURE () << "lerobot_processor_parity.py " << kind << " " << size << ":\n" << log;
  }
  return made[key];
}

/* The real LeRobot (a CI failure without it, a skip elsewhere) and SentencePiece. */
#define PI0_REQUIRE_LEROBOT()                                                                      \
  REQUIRE_LEROBOT_PYTHON (py_, "hold checkpoints against the real LeRobot");                       \
  if (!pi0::Tokenizer::available ())                                                               \
  GTEST_SKIP () << "built without libsentencepiece"

/* What LeRobot gave for its raw observation, and ours for the same one through open_policy(). */
struct Compared {
  at::Tensor ours, theirs;
  std::unique_ptr<pi0::OpenedPolicy> policy;
  pi0::TensorMap io;
};

Compared
run_both (const std::string &dir)
{
  Compared c;
  pi0::OpenOptions o;
  o.device = pi0::DeviceChoice::Cpu;
  o.tokenizer = source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
  c.policy = pi0::open_policy (dir, o); // the directory alone: config, weights, processors
  c.io = pi0::load_safetensors (dir + "/io.safetensors");
  pi0::Request r;
  // LeRobot's cameras are float [0, 1]; the chain's (cudaprep's) are [-1, 1] at the model's
  // size, which is what LeRobot's _preprocess_images makes of them here.
  r.images = at::stack ({c.io.at ("image0"), c.io.at ("image1")}) * 2.0 - 1.0;
  r.state = c.io.at ("state");
  r.prompt = "pick up the red block";
  r.noise = c.io.at ("noise");
  c.ours = c.policy->infer (r).actions;
  c.theirs = c.io.at ("actions");
  return c;
}

void
expect_parity (const Compared &c, const char *what)
{
  ASSERT_EQ (c.ours.sizes (), c.theirs.sizes ()) << what;
  const double scale = c.theirs.abs ().max ().item<double> ();
  const double diff = max_abs (c.ours, c.theirs);
  EXPECT_LE (diff, 1e-5 * std::max (1.0, scale))
      << what << ": max diff " << diff << " at scale " << scale;
  testing::Test::RecordProperty (std::string (what) + "_max_abs_diff", std::to_string (diff));
}

} // namespace

TEST (LeRobotPolicy, Pi05TinyThroughItsProcessorsMatchesLeRobot)
{
  PI0_REQUIRE_LEROBOT ();
  const std::string &dir = checkpoint ("pi05", "tiny");
  ASSERT_FALSE (dir.empty ());
  Compared c = run_both (dir);
  EXPECT_EQ (c.policy->spec ().model_type, "pi05");
  EXPECT_EQ (c.policy->action_dims (), 7); // LeRobot's ACTION feature
  EXPECT_NE (c.policy->describe ().find ("LeRobot's formulas, state quantile, actions quantile"),
             std::string::npos)
      << c.policy->describe ();
  expect_parity (c, "pi05_tiny");
  // Controls: the actions are in robot units (not the model's [-1, 1]), and one bin of one
  // state dim moves them.
  EXPECT_GT (c.theirs.abs ().max ().item<double> (), 3.0);
  pi0::Request r;
  r.images = at::stack ({c.io.at ("image0"), c.io.at ("image1")}) * 2.0 - 1.0;
  r.prompt = "pick up the red block";
  r.noise = c.io.at ("noise");
  r.state = c.io.at ("state").clone ();
  const pi0::NormStats stats = pi0::NormStats::load (dir); // the processor files' statistics
  const pi0::NormVectors &sv = stats.state ();
  r.state[0] += 0.02 * (sv.q99->index ({0}) - sv.q01->index ({0})).item<double> (); // > 1/128
  EXPECT_GT (max_abs (c.policy->infer (r).actions, c.ours), 1e-4);
}

TEST (LeRobotPolicy, Pi0TinyThroughItsProcessorsMatchesLeRobot)
{
  PI0_REQUIRE_LEROBOT ();
  const std::string &dir = checkpoint ("pi0", "tiny");
  ASSERT_FALSE (dir.empty ());
  Compared c = run_both (dir);
  EXPECT_EQ (c.policy->spec ().model_type, "pi0");
  EXPECT_NE (c.policy->describe ().find ("LeRobot's formulas, state zscore, actions zscore"),
             std::string::npos)
      << c.policy->describe ();
  expect_parity (c, "pi0_tiny");
  // LeRobot's tokens for its prompt (the task + "\n" as one text) are ours.
  const pi0::Tokens t =
      c.policy->tokenizer ().encode_lerobot_pi0_prompt ("pick up the red block", 48);
  EXPECT_TRUE (at::equal (t.ids, c.io.at ("tokens").to (at::kLong)));
}

/* pi0.5 at its real widths (SigLIP 1152, Gemma 2048/16384, expert 1024/4096, 224-pixel views:
 * 968 prefix tokens) with two layers: what the tiny sizes cannot show (head dim 256, the
 * condition layers at 1024 -> 3072). */
TEST (LeRobotPolicy, Pi05AtRealWidthsThroughItsProcessorsMatchesLeRobot)
{
  PI0_REQUIRE_LEROBOT ();
  const std::string &dir = checkpoint ("pi05", "mid");
  ASSERT_FALSE (dir.empty ());
  Compared c = run_both (dir);
  expect_parity (c, "pi05_mid");
}

/* pi0.5 and pi0 at full size (every real size but the vocabulary, which is the test
 * tokenizer's): about 11 GB of fp32 weights written by LeRobot and read by us, and minutes of CPU,
 * so by hand only (docs/testing.md): PI0_FULL_PARITY=1. */
static void
expect_full_size_parity (const char *kind)
{
  if (!std::getenv ("PI0_FULL_PARITY"))
    GTEST_SKIP () << "by hand only: PI0_FULL_PARITY=1 (11 GB of weights, minutes of CPU)";
  const std::string &dir = checkpoint (kind, "full");
  ASSERT_FALSE (dir.empty ());
  Compared c = run_both (dir);
  EXPECT_EQ (c.policy->spec ().model_type, kind);
  expect_parity (c, (std::string (kind) + "_full").c_str ());
  std::printf ("%s full size: max |ours - LeRobot| %.3g at scale %.3g\n", kind,
               max_abs (c.ours, c.theirs), c.theirs.abs ().max ().item<double> ());
  std::filesystem::remove (dir + "/model.safetensors"); // 11 GB
}

TEST (LeRobotPolicy, Pi05AtFullSizeThroughItsProcessorsMatchesLeRobot)
{
  PI0_REQUIRE_LEROBOT ();
  expect_full_size_parity ("pi05");
}

TEST (LeRobotPolicy, Pi0AtFullSizeThroughItsProcessorsMatchesLeRobot)
{
  PI0_REQUIRE_LEROBOT ();
  expect_full_size_parity ("pi0");
}

TEST (LeRobotPolicy, BrokenProcessorFilesAreNamed)
{
  PI0_REQUIRE_LEROBOT ();
  ASSERT_FALSE (checkpoint ("pi05", "tiny").empty ());
  TempDir tmp; // a copy: the files are broken one after the other
  const std::string dir = tmp.path () + "/ckpt";
  std::filesystem::copy (checkpoint ("pi05", "tiny"), dir);
  pi0::OpenOptions o;
  o.device = pi0::DeviceChoice::Cpu;
  o.tokenizer = source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
  auto expect_named = [&] (const std::string &needle) {
    try {
      pi0::open_policy (dir, o);
      ADD_FAILURE () << "opened with " << needle;
    } catch (const pi0::OpenError &e) {
      EXPECT_EQ (e.kind (), pi0::OpenError::Kind::Unreadable);
      EXPECT_NE (std::string (e.what ()).find (needle), std::string::npos) << e.what ();
    }
  };
  const std::string stats = dir + "/policy_postprocessor_step_0_unnormalizer_processor.safetensors";
  const std::string post = dir + "/policy_postprocessor.json";
  std::rename (stats.c_str (), (stats + ".away").c_str ());
  expect_named ("policy_postprocessor_step_0_unnormalizer_processor.safetensors");
  std::rename ((stats + ".away").c_str (), stats.c_str ());
  { // corrupt JSON
    std::ifstream in (post);
    std::stringstream ss;
    ss << in.rdbuf ();
    const std::string good = ss.str ();
    std::ofstream (post, std::ios::trunc) << good.substr (0, good.size () / 2);
    expect_named ("policy_postprocessor.json");
    // a step this reader does not know
    std::string custom = good;
    custom.replace (custom.find ("absolute_actions_processor"), 26, "my_custom_filter");
    std::ofstream (post, std::ios::trunc) << custom;
    expect_named ("unknown processor step \"my_custom_filter\"");
    // relative actions enabled
    std::string relative = good;
    relative.replace (relative.find ("\"enabled\": false"), 16, "\"enabled\": true");
    std::ofstream (post, std::ios::trunc) << relative;
    expect_named ("relative actions");
    std::ofstream (post, std::ios::trunc) << good;
  }
  std::remove (post.c_str ());
  expect_named ("no policy_postprocessor.json");
}

/* Each normalization mode's statistics, in files LeRobot's own writer made and this test edited:
 * a missing one is refused at load, naming the file, the feature and the key (LeRobot raises
 * "MEAN_STD normalization mode requires mean and std stats"; read as mean 0 and std 1 it moved
 * the actions silently), and a statistic of integers names its dtype. */
TEST (LeRobotPolicy, MissingStatisticsAreRefusedForEveryMode)
{
  PI0_REQUIRE_LEROBOT ();
  ASSERT_FALSE (checkpoint ("pi0", "tiny").empty ());
  TempDir tmp;
  const std::string dir = tmp.path () + "/ckpt";
  pi0::OpenOptions o;
  o.device = pi0::DeviceChoice::Cpu;
  o.tokenizer = source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
  auto refusal = [&] () -> std::string {
    try {
      pi0::open_policy (dir, o);
      return "";
    } catch (const pi0::OpenError &e) {
      return e.what ();
    }
  };
  struct Side {
    const char *pipeline, *type, *feature;
  };
  const Side sides[] = {{"policy_preprocessor.json", "STATE", "observation.state"},
                        {"policy_postprocessor.json", "ACTION", "action"}};
  const std::pair<const char *, std::vector<const char *>> modes[] = {
      {"MEAN_STD", {"mean", "std"}},
      {"MIN_MAX", {"min", "max"}},
      {"QUANTILES", {"q01", "q99"}},
      {"QUANTILE10", {"q10", "q90"}}};
  for (const Side &side : sides) {
    for (const auto &[mode, keys] : modes) {
      std::filesystem::remove_all (dir);
      std::filesystem::copy (checkpoint ("pi0", "tiny"), dir);
      // The (un)normalizer step: its mode set to @mode, its statistics' file as LeRobot named it.
      const std::string pipeline = dir + "/" + side.pipeline;
      std::string err, stats;
      auto json = pi0::json::load_strict (pipeline, &err);
      ASSERT_TRUE (json) << err;
      for (auto &step : (*json)["steps"])
        if (step["config"].contains ("norm_map")) {
          step["config"]["norm_map"][side.type] = mode;
          stats = dir + "/" + step["state_file"].get<std::string> ();
        }
      ASSERT_FALSE (stats.empty ()) << pipeline;
      std::ofstream (pipeline, std::ios::trunc) << json->dump (2);
      EXPECT_EQ (refusal (), "") << mode << " with every statistic";
      const pi0::TensorMap all = pi0::load_safetensors (stats);
      for (const char *k : keys) {
        pi0::TensorMap less;
        for (const auto &[name, t] : all)
          if (name != std::string (side.feature) + "." + k)
            less.emplace (name, t.clone ());
        ASSERT_EQ (less.size () + 1, all.size ()) << side.feature << "." << k;
        pi0::save_safetensors (stats, less);
        const std::string why = refusal ();
        const std::string file = std::filesystem::path (stats).filename ().string ();
        EXPECT_NE (why.find (file), std::string::npos) << why;
        EXPECT_NE (why.find (std::string (mode) + " normalization of \"" + side.feature +
                             "\" needs \"" + side.feature + "." + k + "\""),
                   std::string::npos)
            << why;
      }
      pi0::TensorMap ints;
      for (const auto &[name, t] : all)
        ints.emplace (name, name == std::string (side.feature) + "." + keys[0] ? t.to (at::kInt)
                                                                               : t.clone ());
      pi0::save_safetensors (stats, ints);
      const std::string why = refusal ();
      EXPECT_NE (why.find ("\"" + std::string (side.feature) + "." + keys[0] +
                           "\" must hold floats, found Int values"),
                 std::string::npos)
          << why;
    }
  }
}
