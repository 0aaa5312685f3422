/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tools/pi0-model, run as a user would (through popen). */
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "inference/io/pi0safetensors.h"
#include "tests/pi0testmodel.h"
#include "tests/pi0testrun.h"

using namespace pi0test;

namespace
{

using Result = CommandResult;

Result
run_tool (const std::string &args)
{
  return run_command (build_root () + "/tools/pi0-model/pi0-model " + args + " --threads 1");
}

bool
contains (const std::string &hay, const std::string &needle)
{
  return hay.find (needle) != std::string::npos;
}

/* The action rows of `run`: lines that hold only numbers. */
std::vector<std::vector<double>>
action_rows (const std::string &out)
{
  std::vector<std::vector<double>> rows;
  std::istringstream in (out);
  std::string line;
  while (std::getline (in, line)) {
    std::istringstream ls (line);
    std::vector<double> row;
    double v;
    while (ls >> v)
      row.push_back (v);
    if (ls.eof () && !row.empty ())
      rows.push_back (row);
  }
  return rows;
}

} // namespace

TEST (Pi0Model, InfoPrintsThePublishedPi0ParameterCount)
{
  Result r = run_tool ("info --config pi0");
  ASSERT_EQ (r.status, 0) << r.out;
  EXPECT_TRUE (contains (r.out, "\nparameters: 3238048528\n")) << r.out;
  EXPECT_TRUE (contains (r.out, "width 1152, depth 27, mlp 4304, heads 16")) << r.out;
  EXPECT_TRUE (contains (r.out, "prefix length: 816")) << r.out;
  EXPECT_TRUE (contains (r.out, "model type: pi0 (")) << r.out;
}

TEST (Pi0Model, InfoPrintsLeRobotsPi05ParameterCountAndWhatTheCheckpointsNormalizationIs)
{
  Result r = run_tool ("info --config pi05");
  ASSERT_EQ (r.status, 0) << r.out;
  EXPECT_TRUE (contains (r.out, "\nparameters: 3353433872\n")) << r.out; // LeRobot's PI05Pytorch
  EXPECT_TRUE (contains (r.out, "model type: pi05 (adaRMSNorm time conditioning")) << r.out;
  EXPECT_TRUE (contains (r.out, "prefix length: 968, suffix length: 50 (50 actions)")) << r.out;
  // A checkpoint with no statistics says so; the pi0.5 goldens are such a one.
  Result g = run_tool ("info --checkpoint " + source_root () + "/tests/parity/lerobot_pi05");
  ASSERT_EQ (g.status, 0) << g.out;
  EXPECT_TRUE (contains (g.out, "model type: pi05")) << g.out;
  EXPECT_TRUE (contains (g.out, "normalization: no LeRobot processor files here")) << g.out;
}

TEST (Pi0Model, InitThenRunMatchesTheSameSeededWeights)
{
  TempDir dir;
  Result init = run_tool ("init --config pi0-tiny --seed 3 --out " + dir.path () +
                          " --tokenizer tests/data/tiny.model");
  ASSERT_EQ (init.status, 0) << init.out;
  std::ifstream cfg (dir.path () + "/config.json");
  std::stringstream ss;
  ss << cfg.rdbuf ();
  EXPECT_TRUE (contains (ss.str (), "\"tokenizer\": \"tests/data/tiny.model\"")) << ss.str ();
  EXPECT_TRUE (std::ifstream (dir.path () + "/model.safetensors").good ());

  Result from_ckpt = run_tool ("run --checkpoint " + dir.path () + " --seed 1");
  Result from_seed = run_tool ("run --config pi0-tiny --weights-seed 3 --seed 1");
  ASSERT_EQ (from_ckpt.status, 0) << from_ckpt.out;
  ASSERT_EQ (from_seed.status, 0) << from_seed.out;
  auto a = action_rows (from_ckpt.out), b = action_rows (from_seed.out);
  ASSERT_EQ (a.size (), 50u) << from_ckpt.out;
  ASSERT_EQ (a[0].size (), 32u);
  EXPECT_EQ (a, b);
  Result other_seed = run_tool ("run --checkpoint " + dir.path () + " --seed 2");
  EXPECT_NE (action_rows (other_seed.out), a);
}

TEST (Pi0Model, BenchPrintsStagesAndMemory)
{
  Result r = run_tool ("bench --config pi0-tiny --iters 2 --warmup 1");
  ASSERT_EQ (r.status, 0) << r.out;
  for (const char *row : {"vision (SigLIP+proj)", "prefix (Gemma, KV)", "denoise (10 steps)",
                          "total (synced stages)", "peak host RSS"})
    EXPECT_TRUE (contains (r.out, row)) << row << "\n" << r.out;
}

TEST (Pi0Model, BadArgumentsExplainThemselves)
{
  Result r = run_tool ("info --config pi0-huge");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "unknown model config 'pi0-huge'")) << r.out;
  r = run_tool ("run --config pi0-tiny --dtype fp16");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "float16 is refused")) << r.out;
  r = run_tool ("run --checkpoint /nonexistent/ckpt");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "/nonexistent/ckpt")) << r.out;
  r = run_tool ("frobnicate");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "usage:")) << r.out;
  r = run_tool ("init --config pi0-tiny --seed x --out /tmp/never");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "--seed needs a non-negative integer")) << r.out;
}

TEST (Pi0Model, RunsALeRobotCheckpointOnGivenInputs)
{
  // The committed LeRobot goldens through the tool: checkpoint dir, --inputs, --out.
  TempDir dir;
  const std::string golden = source_root () + "/tests/parity/lerobot_pi0";
  Result r = run_tool ("run --checkpoint " + golden + " --inputs " + golden +
                       "/io.safetensors --out " + dir.path () + "/actions.safetensors");
  ASSERT_EQ (r.status, 0) << r.out;
  at::Tensor ours = pi0::load_safetensors (dir.path () + "/actions.safetensors").at ("actions");
  at::Tensor theirs = pi0::load_safetensors (golden + "/io.safetensors").at ("actions");
  EXPECT_TRUE (at::allclose (ours, theirs, 1e-2, 5e-3)) << max_abs (ours, theirs);
}

/* Issue 25: the guided sampler checked from outside, with nothing but the tool: pi0-model run
 * with LeRobot's own RTC settings and prefixes (tests/parity/lerobot_pi0/rtc.safetensors, made by
 * the real lerobot 0.6.1) gives LeRobot's guided actions. */
TEST (Pi0Model, RunWithRtcOptionsReproducesLeRobotsGuidedChunks)
{
  TempDir dir;
  const std::string golden = source_root () + "/tests/parity/lerobot_pi0";
  pi0::TensorMap g = pi0::load_safetensors (golden + "/rtc.safetensors");
  const char *schedules[] = {"zeros", "ones", "linear", "exp"};
  int cases = 0;
  for (const char *name : {"identity_linear", "identity_exp_clamped", "identity_zeros",
                           "identity_ones", "vjp_exp", "vjp_linear"}) {
    SCOPED_TRACE (name);
    const std::string n (name);
    ASSERT_TRUE (g.count (n + ".actions"));
    at::Tensor p = g.at (n + ".params");
    const int64_t d = p[0].item<int64_t> (), s = p[1].item<int64_t> ();
    const bool identity = p[3].item<int64_t> () != 0;
    const char *schedule = schedules[p[4].item<int64_t> ()];
    char beta[64];
    std::snprintf (beta, sizeof beta, "%.17g", g.at (n + ".beta").item<double> ());
    const std::string prefix = dir.path () + "/" + n + ".prefix.safetensors";
    pi0::save_safetensors (prefix, {{"prefix", g.at (n + ".prefix")}});
    const std::string out = dir.path () + "/" + n + ".safetensors";
    Result r = run_tool ("run --checkpoint " + golden + " --inputs " + golden +
                         "/io.safetensors --out " + out + " --rtc-prefix " + prefix +
                         " --rtc-delay " + std::to_string (d) + " --rtc-execution-horizon " +
                         std::to_string (s) + " --rtc-max-guidance-weight " + beta +
                         " --rtc-schedule " + schedule + " --rtc-jacobian " +
                         (identity ? "identity" : "vjp"));
    ASSERT_EQ (r.status, 0) << r.out;
    EXPECT_TRUE (contains (r.out, std::string (", guided (real-time chunking: ") +
                                      std::to_string (g.at (n + ".prefix").size (0)) +
                                      " prefix rows, delay " + std::to_string (d)))
        << r.out;
    at::Tensor ours = pi0::load_safetensors (out).at ("actions");
    const at::Tensor theirs = g.at (n + ".actions");
    EXPECT_LE (max_abs (ours, theirs), 1e-5) << "max |pi0-model run - LeRobot|";
    cases++;
  }
  EXPECT_EQ (cases, 6);

  /* Not vacuous: without the options the same run gives the plain chunk, far from them. */
  const std::string plain = dir.path () + "/plain.safetensors";
  Result r = run_tool ("run --checkpoint " + golden + " --inputs " + golden +
                       "/io.safetensors --out " + plain);
  ASSERT_EQ (r.status, 0) << r.out;
  EXPECT_GT (max_abs (pi0::load_safetensors (plain).at ("actions"),
                      g.at ("vjp_exp.actions")),
             1e-2);
  /* An earlier run's --out is a prefix as it is ('actions'), from --rtc-start on. */
  r = run_tool ("run --checkpoint " + golden + " --inputs " + golden +
                "/io.safetensors --rtc-prefix " + plain + " --rtc-start 10 --rtc-delay 3");
  ASSERT_EQ (r.status, 0) << r.out;
  EXPECT_TRUE (contains (r.out, "guided (real-time chunking: 40 prefix rows, delay 3, execution "
                                "horizon 0, beta 5, schedule exp, jacobian vjp)"))
      << r.out;
}

TEST (Pi0Model, RtcOptionsThatCannotWorkExplainThemselves)
{
  TempDir dir;
  Result r = run_tool ("run --config pi0-tiny --rtc-delay 3");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "--rtc-delay needs --rtc-prefix FILE.safetensors")) << r.out;
  const std::string prev = dir.path () + "/prev.safetensors";
  r = run_tool ("run --config pi0-tiny --out " + prev);
  ASSERT_EQ (r.status, 0) << r.out;
  r = run_tool ("run --config pi0-tiny --rtc-prefix " + prev + " --rtc-schedule cosine");
  EXPECT_EQ (r.status, 2);
  EXPECT_TRUE (contains (r.out, "'cosine' is not one of zeros, ones, linear, exp")) << r.out;
  r = run_tool ("run --config pi0-tiny --rtc-prefix " + prev + " --rtc-jacobian full");
  EXPECT_TRUE (contains (r.out, "'full' is not vjp or identity")) << r.out;
  r = run_tool ("run --config pi0-tiny --rtc-prefix " + prev + " --rtc-start 50");
  EXPECT_TRUE (contains (r.out, "--rtc-start 50 leaves no row of the 50")) << r.out;
  r = run_tool ("run --config pi0-tiny --rtc-prefix " + prev + " --rtc-max-guidance-weight nan");
  EXPECT_TRUE (contains (r.out, "--rtc-max-guidance-weight needs a finite number >= 0")) << r.out;
  r = run_tool ("run --config pi0-tiny --rtc-prefix " + prev + " --rtc-delay 60");
  EXPECT_EQ (r.status, 2) << r.out;
  EXPECT_TRUE (contains (r.out, "RTC")) << "the model's own check: " << r.out;
  const std::string empty = dir.path () + "/empty.safetensors";
  pi0::save_safetensors (empty, {{"other", at::zeros ({2, 2})}});
  r = run_tool ("run --config pi0-tiny --rtc-prefix " + empty);
  EXPECT_TRUE (contains (r.out, "holds no 'actions' or 'prefix' tensor")) << r.out;
  r = run_tool ("run --config pi0-tiny --rtc-prefix /nonexistent.safetensors");
  EXPECT_TRUE (contains (r.out, "/nonexistent.safetensors")) << r.out;
}

TEST (Pi0Model, InfoReadsACheckpointConfig)
{
  const std::string golden = source_root () + "/tests/parity/lerobot_pi0";
  Result r = run_tool ("info --checkpoint " + golden);
  ASSERT_EQ (r.status, 0) << r.out;
  EXPECT_TRUE (contains (r.out, "config: lerobot-golden-tiny")) << r.out;
  // The count of the module tree equals the number of values in the LeRobot file.
  int64_t n = 0;
  for (const auto &kv : pi0::load_safetensors (golden + "/model.safetensors"))
    n += kv.second.numel ();
  EXPECT_TRUE (contains (r.out, "\nparameters: " + std::to_string (n) + "\n")) << r.out;
}

TEST (Pi0Model, PromptGoesThroughTheTokenizer)
{
  const std::string tok = source_root () + "/tests/data/tokenizer/tiny_paligemma.model";
  Result a =
      run_tool ("run --config pi0-tiny --seed 1 --prompt 'pick up the red cup' --tokenizer " + tok);
  Result b = run_tool (
      "run --config pi0-tiny --seed 1 --prompt 'put down the blue box' --tokenizer " + tok);
  ASSERT_EQ (a.status, 0) << a.out;
  ASSERT_EQ (b.status, 0) << b.out;
  EXPECT_EQ (action_rows (a.out).size (), 50u);
  EXPECT_NE (action_rows (a.out), action_rows (b.out)); // the instruction reaches the actions
  Result c = run_tool ("run --config pi0-tiny --prompt 'x'");
  EXPECT_EQ (c.status, 2);
  EXPECT_TRUE (contains (c.out, "--prompt needs --tokenizer")) << c.out;
}
