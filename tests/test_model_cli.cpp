/* pi0-model, the command-line tool, run as a user would (through popen). */
#include <cstdio>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "test_model_util.h"

using namespace pi0test;

namespace
{

struct Result {
  int status = -1;
  std::string out; // stdout and stderr together
};

Result
run_tool (const std::string &args)
{
  std::string cmd = build_root () + "/tools/pi0-model/pi0-model " + args + " --threads 1 2>&1";
  Result r;
  FILE *p = popen (cmd.c_str (), "r");
  if (!p)
    return r;
  char buf[4096];
  size_t n;
  while ((n = fread (buf, 1, sizeof buf, p)) > 0)
    r.out.append (buf, n);
  int st = pclose (p);
  r.status = WIFEXITED (st) ? WEXITSTATUS (st) : -1;
  return r;
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

TEST (ModelCli, InfoPrintsThePublishedPi0ParameterCount)
{
  Result r = run_tool ("info --config pi0");
  ASSERT_EQ (r.status, 0) << r.out;
  EXPECT_TRUE (contains (r.out, "\nparameters: 3238048528\n")) << r.out;
  EXPECT_TRUE (contains (r.out, "width 1152, depth 27, mlp 4304, heads 16")) << r.out;
  EXPECT_TRUE (contains (r.out, "prefix length: 816")) << r.out;
}

TEST (ModelCli, InitThenRunMatchesTheSameSeededWeights)
{
  TempDir dir;
  Result init = run_tool ("init --config pi0-tiny --seed 3 --out " + dir.path +
                          " --tokenizer tests/data/tiny.model");
  ASSERT_EQ (init.status, 0) << init.out;
  std::ifstream cfg (dir.path + "/config.json");
  std::stringstream ss;
  ss << cfg.rdbuf ();
  EXPECT_TRUE (contains (ss.str (), "\"tokenizer\": \"tests/data/tiny.model\"")) << ss.str ();
  EXPECT_TRUE (std::ifstream (dir.path + "/model.safetensors").good ());

  Result from_ckpt = run_tool ("run --checkpoint " + dir.path + " --seed 1");
  Result from_seed = run_tool ("run --config pi0-tiny --weights-seed 3 --seed 1");
  ASSERT_EQ (from_ckpt.status, 0) << from_ckpt.out;
  ASSERT_EQ (from_seed.status, 0) << from_seed.out;
  auto a = action_rows (from_ckpt.out), b = action_rows (from_seed.out);
  ASSERT_EQ (a.size (), 50u) << from_ckpt.out;
  ASSERT_EQ (a[0].size (), 32u);
  EXPECT_EQ (a, b);
  Result other_seed = run_tool ("run --checkpoint " + dir.path + " --seed 2");
  EXPECT_NE (action_rows (other_seed.out), a);
}

TEST (ModelCli, BenchPrintsStagesAndMemory)
{
  Result r = run_tool ("bench --config pi0-tiny --iters 2 --warmup 1");
  ASSERT_EQ (r.status, 0) << r.out;
  for (const char *row : {"vision (SigLIP+proj)", "prefix (Gemma, KV)", "denoise (10 steps)",
                          "total (synced stages)", "peak host RSS"})
    EXPECT_TRUE (contains (r.out, row)) << row << "\n" << r.out;
}

TEST (ModelCli, BadArgumentsExplainThemselves)
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

TEST (ModelCli, RunsALeRobotCheckpointOnGivenInputs)
{
  // The committed LeRobot goldens through the tool: checkpoint dir, --inputs, --out.
  TempDir dir;
  const std::string golden = source_root () + "/tests/parity/lerobot_pi0";
  Result r = run_tool ("run --checkpoint " + golden + " --inputs " + golden +
                       "/io.safetensors --out " + dir.path + "/actions.safetensors");
  ASSERT_EQ (r.status, 0) << r.out;
  at::Tensor ours = pi0::load_safetensors (dir.path + "/actions.safetensors").at ("actions");
  at::Tensor theirs = pi0::load_safetensors (golden + "/io.safetensors").at ("actions");
  EXPECT_TRUE (at::allclose (ours, theirs, 1e-2, 5e-3)) << max_abs (ours, theirs);
}

TEST (ModelCli, InfoReadsACheckpointConfig)
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

TEST (ModelCli, PromptGoesThroughTheTokenizer)
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

/* pi0-demo checks --rtc against pi0infer's modes before it starts anything (no robot simulator,
 * no pipeline): a typo is a clear error, not a demo silently running without RTC. */
TEST (Pi0Demo, UnknownRtcModeIsAClearError)
{
  const std::string cmd = build_root () + "/tools/pi0-demo --rtc guidd --duration 1 2>&1";
  FILE *p = popen (cmd.c_str (), "r");
  ASSERT_NE (p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread (buf, 1, sizeof buf, p)) > 0)
    out.append (buf, n);
  const int st = pclose (p);
  ASSERT_TRUE (WIFEXITED (st)) << out;
  EXPECT_EQ (WEXITSTATUS (st), 2) << out;
  EXPECT_TRUE (contains (out, "--rtc: 'guidd' is not one of off, guided, guided-identity")) << out;
  EXPECT_FALSE (contains (out, "gst-pi0 demo:")) << "the demo must not start: " << out;
}
