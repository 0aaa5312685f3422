/* pi0-model: inspect, initialise, run and benchmark the native Pi0 (see docs/model.md).
 *
 *   pi0-model info  (--config NAME | --checkpoint DIR)
 *   pi0-model init  --config NAME --seed S --out DIR [--tokenizer PATH]
 *   pi0-model run   (--config NAME [--weights-seed S] | --checkpoint DIR | --torchscript FILE)
 *                   [--device cpu|cuda] [--dtype fp32|bf16] [--seed S] [--inputs FILE.safetensors]
 *                   [--prompt TEXT --tokenizer MODEL] [--out FILE.safetensors] [--no-graph]
 *                   [--rtc-prefix FILE.safetensors [--rtc-start ROW] [--rtc-delay D]
 *                    [--rtc-execution-horizon S] [--rtc-max-guidance-weight B]
 *                    [--rtc-schedule zeros|ones|linear|exp] [--rtc-jacobian vjp|identity]]
 *   pi0-model bench (--config NAME | --checkpoint DIR) [--device] [--dtype] [--iters N] [--warmup N]
 *                   [--no-graph] [--rtc] [--batch N]
 *   any command: [--threads N]
 */
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include "inference/io/pi0error.h"
#include "inference/io/pi0safetensors.h"
#include "inference/io/pi0normstats.h"
#include "inference/io/pi0tokenizer.h"
#include "inference/model/pi0cudasupport.h"
#include "inference/model/pi0model.h"
#include "inference/model/pi0policy.h"

namespace
{

const char *kUsage =
    "usage:\n"
    "  pi0-model info  (--config NAME | --checkpoint DIR)\n"
    "  pi0-model init  --config NAME --seed S --out DIR [--tokenizer PATH]\n"
    "  pi0-model run   (--config NAME [--weights-seed S] | --checkpoint DIR | --torchscript FILE)\n"
    "                  [--device cpu|cuda[:N]] [--dtype fp32|bf16] [--seed S] [--inputs "
    "FILE.safetensors]\n"
    "                  [--prompt TEXT --tokenizer MODEL] [--out FILE.safetensors] [--no-graph]\n"
    "                  [--rtc-prefix FILE.safetensors (real-time chunking toward it: 'actions' or\n"
    "                   'prefix' [R, A], model space, e.g. an earlier run's --out)\n"
    "                   [--rtc-start ROW (its first row used; default 0)] [--rtc-delay D]\n"
    "                   [--rtc-execution-horizon S] [--rtc-max-guidance-weight B (default 5)]\n"
    "                   [--rtc-schedule zeros|ones|linear|exp (default exp)]\n"
    "                   [--rtc-jacobian vjp|identity (default vjp)]]\n"
    "  pi0-model bench (--config NAME | --checkpoint DIR) [--device] [--dtype] [--iters N] "
    "[--warmup N]\n"
    "                  [--no-graph] [--rtc (plain vs real-time-chunking per chunk)]\n"
    "                  [--batch N (ms per request, one at a time vs stacked, batch 1..N)]\n"
    "  any command: [--threads N] (CPU intra-op threads)\n"
    "configs: pi0, pi0-tiny\n";

struct Args {
  std::string command;
  std::map<std::string, std::string> opts;
  bool has (const std::string &k) const { return opts.count (k) > 0; }
  std::string get (const std::string &k, const std::string &fallback = "") const
  {
    auto it = opts.find (k);
    return it == opts.end () ? fallback : it->second;
  }
  long long get_int (const std::string &k, long long fallback) const
  {
    if (!has (k))
      return fallback;
    const std::string &v = opts.at (k);
    char *end = nullptr;
    long long n = std::strtoll (v.c_str (), &end, 10);
    if (v.empty () || *end != '\0' || n < 0)
      throw pi0::Error ("--" + k + " needs a non-negative integer, got '" + v + "'");
    return n;
  }
};

Args
parse_args (int argc, char **argv)
{
  static const std::vector<std::string> flags = {"no-graph", "rtc"};
  static const std::vector<std::string> valued = {
      "config", "checkpoint", "torchscript", "seed",    "weights-seed",
      "out",    "tokenizer",  "device",      "dtype",   "inputs",
      "prompt", "iters",      "warmup",      "threads", "batch",
      "rtc-prefix", "rtc-start", "rtc-delay", "rtc-execution-horizon", "rtc-max-guidance-weight",
      "rtc-schedule", "rtc-jacobian"};
  Args a;
  if (argc < 2)
    throw pi0::Error ("no command given");
  a.command = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string s = argv[i];
    if (s.rfind ("--", 0) != 0)
      throw pi0::Error ("unexpected argument '" + s + "'");
    std::string key = s.substr (2);
    if (std::find (flags.begin (), flags.end (), key) != flags.end ()) {
      a.opts[key] = "1";
    } else if (std::find (valued.begin (), valued.end (), key) != valued.end ()) {
      if (i + 1 >= argc)
        throw pi0::Error ("--" + key + " needs a value");
      a.opts[key] = argv[++i];
    } else {
      throw pi0::Error ("unknown option '" + s + "'");
    }
  }
  return a;
}

pi0::Pi0Config
config_of (const Args &a)
{
  if (a.has ("checkpoint")) {
    // openpi's converter writes no model type into config.json: the weights' names tell it
    // (the file is memory-mapped, nothing is copied).
    const std::string dir = a.get ("checkpoint");
    const pi0::ModelKind kind =
        pi0::model_kind_of (pi0::load_safetensors (dir + "/model.safetensors"));
    return pi0::config_from_json_file (dir + "/config.json", kind);
  }
  if (!a.has ("config"))
    throw pi0::Error ("--config NAME or --checkpoint DIR is required");
  return pi0::config_by_name (a.get ("config"));
}

int
cmd_info (const Args &a)
{
  pi0::Pi0Config cfg = config_of (a);
  // Built on the meta device: the real module tree, counted without allocating its weights.
  pi0::Pi0Model model (cfg, at::TensorOptions ().device (at::kMeta));
  std::cout << cfg.describe ();
  std::cout << "parameters: " << model.num_parameters () << "\n";
  if (a.has ("checkpoint")) {
    // Where the checkpoint's statistics are, and whose formulas they take (docs/checkpoints.md).
    const std::string dir = a.get ("checkpoint");
    if (pi0::has_lerobot_processors (dir)) {
      const pi0::LeRobotProcessors lp = pi0::load_lerobot_processors (dir);
      std::cout << "normalization: LeRobot's formulas, state "
                << pi0::norm_mode_name (lp.stats.state_mode ().value_or (pi0::NormMode::Identity))
                << " (" << lp.state_dims << " dims), actions "
                << pi0::norm_mode_name (lp.stats.action_mode ().value_or (pi0::NormMode::Identity))
                << " (" << lp.action_dims << " dims); statistics from " << lp.stats.source ()
                << "\n";
    } else {
      std::cout << "normalization: no LeRobot processor files here; give openpi's "
                   "assets/<robot>/norm_stats.json (pi0: zscore, pi05: quantile), or actions stay "
                   "normalized\n";
    }
  }
  return 0;
}

int
cmd_init (const Args &a)
{
  if (!a.has ("config") || !a.has ("seed") || !a.has ("out"))
    throw pi0::Error ("init needs --config NAME --seed S --out DIR");
  pi0::Pi0Config cfg = pi0::config_by_name (a.get ("config"));
  if (a.has ("tokenizer"))
    cfg.tokenizer = a.get ("tokenizer");
  pi0::Pi0Model model (cfg);
  model.init_random (static_cast<uint64_t> (a.get_int ("seed", 0)));
  pi0::save_pi0_model (model, a.get ("out"));
  std::cout << "wrote " << a.get ("out") << "/model.safetensors (" << model.num_parameters ()
            << " parameters) and " << a.get ("out") << "/config.json (tokenizer: " << cfg.tokenizer
            << ")\n";
  return 0;
}

pi0::PolicyOptions
options_of (const Args &a)
{
  pi0::PolicyOptions o;
  o.device = pi0::parse_device (a.get ("device", "cpu"));
  o.dtype = pi0::parse_dtype (a.get ("dtype", "fp32"));
  o.cuda_graph = !a.has ("no-graph");
  return o;
}

std::unique_ptr<pi0::Policy>
policy_of (const Args &a)
{
  pi0::PolicyOptions o = options_of (a);
  if (a.has ("torchscript"))
    return pi0::load_torchscript_policy (a.get ("torchscript"), o);
  if (a.has ("checkpoint"))
    return pi0::load_pi0_policy (a.get ("checkpoint"), o);
  auto model = std::make_shared<pi0::Pi0Model> (config_of (a));
  model->init_random (static_cast<uint64_t> (a.get_int ("weights-seed", 0)));
  return pi0::make_pi0_policy (model, o);
}

/* Seeded random observation matching the spec: views in [-1,1], all views valid, the first
 * third of the tokens valid, a state in [-1,1]. */
pi0::PolicyInput
random_input (const pi0::PolicySpec &s, uint64_t seed)
{
  auto gen = at::make_generator<at::CPUGeneratorImpl> (seed ^ 0x5eed5eedULL);
  pi0::PolicyInput in;
  int views = s.num_views ? s.num_views : 3, size = s.image_size ? s.image_size : 224;
  int len = s.max_tokens ? s.max_tokens : 48, sd = s.state_dim ? s.state_dim : 32;
  in.images = at::empty ({views, 3, size, size}).uniform_ (-1, 1, gen);
  in.image_masks = at::ones ({views}, at::kBool);
  in.tokens = at::randint (1, 256, {len}, gen, at::TensorOptions ().dtype (at::kLong));
  in.token_mask = at::arange (len) < std::max (1, len / 3);
  in.tokens = in.tokens * in.token_mask;
  in.state = at::empty ({sd}).uniform_ (-1, 1, gen);
  in.seed = seed;
  return in;
}

pi0::PolicyInput
input_of (const Args &a, const pi0::PolicySpec &spec)
{
  pi0::PolicyInput in = random_input (spec, static_cast<uint64_t> (a.get_int ("seed", 0)));
  if (a.has ("inputs")) {
    pi0::TensorMap t = pi0::load_safetensors (a.get ("inputs"));
    auto take = [&] (const char *k, at::Tensor &dst) {
      if (t.count (k))
        dst = t.at (k);
    };
    take ("images", in.images);
    take ("image_masks", in.image_masks);
    take ("tokens", in.tokens);
    take ("token_mask", in.token_mask);
    take ("state", in.state);
    take ("noise", in.noise);
    if (in.image_masks.defined () && in.image_masks.scalar_type () != at::kBool)
      in.image_masks = in.image_masks != 0;
    if (in.token_mask.defined () && in.token_mask.scalar_type () != at::kBool)
      in.token_mask = in.token_mask != 0;
  }
  if (a.has ("prompt")) {
    if (!a.has ("tokenizer"))
      throw pi0::Error ("--prompt needs --tokenizer MODEL (a SentencePiece .model file)");
    pi0::Tokenizer tok = pi0::Tokenizer::load (a.get ("tokenizer"));
    pi0::Tokens t = tok.encode_prompt (a.get ("prompt"), spec.max_tokens ? spec.max_tokens : 48);
    in.tokens = t.ids;
    in.token_mask = t.mask;
  }
  return in;
}

/* --rtc-*: the guidance of docs/rtc.md, given by hand. The prefix is rows [start, R) of the file's
 * "actions" (what --out writes) or "prefix" tensor, in the model's space. */
pi0::PolicyGuidance
guidance_of (const Args &a)
{
  pi0::PolicyGuidance g;
  static const char *options[] = {"rtc-start",  "rtc-delay",   "rtc-execution-horizon",
                                  "rtc-max-guidance-weight", "rtc-schedule", "rtc-jacobian"};
  if (!a.has ("rtc-prefix")) {
    for (const char *o : options)
      if (a.has (o))
        throw pi0::Error (std::string ("--") + o + " needs --rtc-prefix FILE.safetensors");
    return g;
  }
  const std::string file = a.get ("rtc-prefix");
  pi0::TensorMap t = pi0::load_safetensors (file);
  const char *key = t.count ("prefix") ? "prefix" : "actions";
  if (!t.count (key))
    throw pi0::Error (file + ": holds no 'actions' or 'prefix' tensor (write one with "
                             "pi0-model run --out)");
  at::Tensor p = t.at (key);
  if (p.dim () != 2)
    throw pi0::Error (file + ": '" + key + "' must be [rows, action dims]");
  const int64_t start = a.get_int ("rtc-start", 0);
  if (start >= p.size (0))
    throw pi0::Error ("--rtc-start " + std::to_string (start) + " leaves no row of the " +
                      std::to_string (p.size (0)) + " in " + file);
  g.prefix = p.narrow (0, start, p.size (0) - start).to (at::kFloat).contiguous ();
  g.delay = a.get_int ("rtc-delay", 0);
  g.execution_horizon = a.get_int ("rtc-execution-horizon", 0);
  if (a.has ("rtc-max-guidance-weight")) {
    const std::string v = a.get ("rtc-max-guidance-weight");
    char *end = nullptr;
    g.max_guidance_weight = std::strtod (v.c_str (), &end);
    if (v.empty () || *end != '\0' || !(g.max_guidance_weight >= 0) ||
        !std::isfinite (g.max_guidance_weight))
      throw pi0::Error ("--rtc-max-guidance-weight needs a finite number >= 0, got '" + v + "'");
  }
  const std::string schedule = a.get ("rtc-schedule", "exp");
  if (schedule == "zeros")
    g.schedule = pi0::RtcSchedule::Zeros;
  else if (schedule == "ones")
    g.schedule = pi0::RtcSchedule::Ones;
  else if (schedule == "linear")
    g.schedule = pi0::RtcSchedule::Linear;
  else if (schedule == "exp")
    g.schedule = pi0::RtcSchedule::Exp;
  else
    throw pi0::Error ("--rtc-schedule: '" + schedule + "' is not one of zeros, ones, linear, exp");
  const std::string jacobian = a.get ("rtc-jacobian", "vjp");
  if (jacobian != "vjp" && jacobian != "identity")
    throw pi0::Error ("--rtc-jacobian: '" + jacobian + "' is not vjp or identity");
  g.identity_jacobian = jacobian == "identity";
  return g;
}

int
cmd_run (const Args &a)
{
  pi0::PolicyGuidance guidance = guidance_of (a); /* bad options fail before the model loads */
  auto policy = policy_of (a);
  pi0::PolicyInput in = input_of (a, policy->spec ());
  if (guidance.prefix.defined ()) {
    if (!policy->supports_guidance ())
      throw pi0::Error ("--rtc-prefix needs the native model (--config or --checkpoint): a "
                        "TorchScript policy cannot be guided");
    in.guidance = guidance;
  }
  pi0::StageTimings t;
  at::Tensor actions = policy->infer (in, &t);
  std::cout << policy->describe () << "\n";
  std::cout << "actions [" << actions.size (0) << ", " << actions.size (1) << "] in " << t.total_ms
            << " ms";
  if (in.guidance.prefix.defined ())
    std::cout << ", guided (real-time chunking: " << in.guidance.prefix.size (0)
              << " prefix rows, delay " << in.guidance.delay << ", execution horizon "
              << in.guidance.execution_horizon << ", beta " << in.guidance.max_guidance_weight
              << ", schedule " << a.get ("rtc-schedule", "exp") << ", jacobian "
              << a.get ("rtc-jacobian", "vjp") << ")";
  std::cout << "\n";
  auto acc = actions.accessor<float, 2> ();
  for (int64_t i = 0; i < actions.size (0); i++) {
    for (int64_t j = 0; j < actions.size (1); j++)
      std::printf ("%s% .6f", j ? " " : "", acc[i][j]);
    std::printf ("\n");
  }
  if (a.has ("out"))
    pi0::save_safetensors (a.get ("out"), {{"actions", actions}});
  return 0;
}

/* Peak resident set of this process in bytes (Linux VmHWM). */
int64_t
peak_rss_bytes ()
{
  std::ifstream f ("/proc/self/status");
  std::string line;
  while (std::getline (f, line))
    if (line.rfind ("VmHWM:", 0) == 0)
      return std::stoll (line.substr (6)) * 1024;
  return -1;
}

/* bench --rtc: ms per chunk (vision + prefix + 10 steps, the model called directly, eager) plain
 * and with RTC guidance in both Jacobian modes (docs/rtc.md). The prefix is the tail (from row
 * 10) of a chunk for other noise, d = 5, s = 10, the exponential mask, beta 5 (Vjp) or 10
 * (Identity), the defaults of docs/rtc.md. */
int
bench_rtc (const Args &a)
{
  if (a.has ("torchscript"))
    throw pi0::Error ("--rtc needs the native model (--config or --checkpoint)");
  std::shared_ptr<pi0::Pi0Model> model;
  if (a.has ("checkpoint")) {
    model = pi0::load_pi0_model (a.get ("checkpoint"));
  } else {
    model = std::make_shared<pi0::Pi0Model> (config_of (a));
    model->init_random (static_cast<uint64_t> (a.get_int ("weights-seed", 0)));
  }
  const pi0::PolicyOptions o = options_of (a);
  model->set_precision (o.device, o.dtype);
  const pi0::Pi0Config &cfg = model->config ();
  const int iters = static_cast<int> (a.get_int ("iters", 20)),
            warmup = static_cast<int> (a.get_int ("warmup", 3));
  if (iters < 1)
    throw pi0::Error ("--iters must be at least 1");
  pi0::PolicySpec spec;
  spec.num_views = cfg.num_views;
  spec.image_size = cfg.vision.image_size;
  spec.max_tokens = cfg.max_tokens;
  spec.state_dim = cfg.state_dim;
  pi0::PolicyInput in = random_input (spec, static_cast<uint64_t> (a.get_int ("seed", 0)));
  auto gen = at::make_generator<at::CPUGeneratorImpl> (in.seed + 1);
  auto dev = [&] (const at::Tensor &t) {
    return t.unsqueeze (0).to (o.device);
  };
  at::Tensor images = dev (in.images), masks = dev (in.image_masks), tokens = dev (in.tokens),
             token_mask = dev (in.token_mask), state = dev (in.state);
  at::Tensor noise = dev (at::empty ({cfg.horizon, cfg.action_dim}).normal_ (0, 1, gen));
  c10::InferenceMode guard;
  pi0::RtcGuidance rtc;
  rtc.prefix = model->sample_actions (images, masks, tokens, token_mask, state, noise.flip (1))
                   .narrow (1, 10, cfg.horizon - 10);
  rtc.delay = 5;
  rtc.execution_horizon = 10;
  auto time_ms = [&] (auto run) {
    for (int i = 0; i < warmup; i++)
      run ();
    std::vector<double> v;
    for (int i = 0; i < iters; i++) {
      auto t0 = std::chrono::steady_clock::now ();
      run ();
      pi0::synchronize_device (o.device);
      v.push_back (
          std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
              .count ());
    }
    std::sort (v.begin (), v.end ());
    double mean = 0;
    for (double x : v)
      mean += x;
    return std::array<double, 3>{v[v.size () / 2], mean / v.size (), v.front ()};
  };
  std::cout << "native " << cfg.name << ", " << o.device << ", " << c10::toString (o.dtype)
            << ", eager; iterations: " << iters << " (after " << warmup
            << " warm-up), threads: " << at::get_num_threads () << "\n";
  std::printf ("%-34s %10s %10s %10s\n", "ms per chunk", "median", "mean", "min");
  auto plain =
      time_ms ([&] { model->sample_actions (images, masks, tokens, token_mask, state, noise); });
  std::printf ("%-34s %10.3f %10.3f %10.3f\n", "plain", plain[0], plain[1], plain[2]);
  for (auto j : {pi0::RtcJacobian::Identity, pi0::RtcJacobian::Vjp}) {
    rtc.jacobian = j;
    rtc.max_guidance_weight = j == pi0::RtcJacobian::Vjp ? 5.0 : 10.0;
    auto r = time_ms ([&] {
      model->sample_actions_guided (images, masks, tokens, token_mask, state, noise, rtc);
    });
    std::printf ("%-34s %10.3f %10.3f %10.3f\n",
                 j == pi0::RtcJacobian::Vjp ? "RTC guided, Vjp (paper)"
                                            : "RTC guided, Identity (LeRobot)",
                 r[0], r[1], r[2]);
  }
  std::printf ("peak host RSS: %.1f MiB\n", peak_rss_bytes () / 1048576.0);
  return 0;
}

/* bench --batch N: ms per request for N different requests (own seed, state, views, tokens)
 * run one at a time (Policy::infer each) and stacked into one forward pass
 * (Policy::infer_batch), for batch sizes 1, 2, 4, ... up to N (batch 1 is the same call both
 * ways: its ratio shows the noise). */
int
bench_batch (const Args &a)
{
  auto policy = policy_of (a);
  const int iters = static_cast<int> (a.get_int ("iters", 10)),
            warmup = static_cast<int> (a.get_int ("warmup", 2));
  const long long max_batch = a.get_int ("batch", 0);
  if (iters < 1)
    throw pi0::Error ("--iters must be at least 1");
  if (max_batch < 1 || max_batch > 64)
    throw pi0::Error ("--batch must be 1..64");
  const uint64_t seed = static_cast<uint64_t> (a.get_int ("seed", 0));
  /* Medians of the two ways, measured alternately call by call, so that a load that comes and
   * goes (a shared machine) weighs on both alike. */
  auto medians_ms = [&] (auto one_by_one, auto stacked) {
    for (int i = 0; i < warmup; i++) {
      one_by_one ();
      stacked ();
    }
    std::vector<double> a, b;
    auto time = [] (auto run) {
      auto t0 = std::chrono::steady_clock::now ();
      run ();
      return std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
          .count ();
    };
    for (int i = 0; i < iters; i++) {
      a.push_back (time (one_by_one));
      b.push_back (time (stacked));
    }
    std::sort (a.begin (), a.end ());
    std::sort (b.begin (), b.end ());
    return std::array<double, 2>{a[a.size () / 2], b[b.size () / 2]};
  };
  std::cout << policy->describe () << "\n";
  std::cout << "iterations: " << iters << " (after " << warmup
            << " warm-up), threads: " << at::get_num_threads () << ", median per call\n";
  std::printf ("%-6s %18s %18s %10s\n", "batch", "one-at-a-time ms/req", "batched ms/req",
               "speed-up");
  for (long long n = 1;; n = std::min (n * 2, max_batch)) {
    std::vector<pi0::PolicyInput> ins;
    for (long long i = 0; i < n; i++)
      ins.push_back (random_input (policy->spec (), seed + static_cast<uint64_t> (i)));
    const auto m = medians_ms (
        [&] {
          for (const auto &in : ins)
            policy->infer (in);
        },
        [&] { policy->infer_batch (ins); });
    const double alone = m[0], stacked = m[1];
    std::printf ("%-6lld %18.3f %18.3f %9.2fx\n", n, alone / n, stacked / n, alone / stacked);
    if (n == max_batch)
      break;
  }
  std::printf ("peak host RSS: %.1f MiB\n", peak_rss_bytes () / 1048576.0);
  return 0;
}

int
cmd_bench (const Args &a)
{
  if (a.has ("rtc"))
    return bench_rtc (a);
  if (a.has ("batch"))
    return bench_batch (a);
  auto policy = policy_of (a);
  const int iters = static_cast<int> (a.get_int ("iters", 20)),
            warmup = static_cast<int> (a.get_int ("warmup", 3));
  if (iters < 1)
    throw pi0::Error ("--iters must be at least 1");
  pi0::PolicyInput in = input_of (a, policy->spec ());
  pi0::cuda_reset_peak (policy->device ());
  pi0::StageTimings t;
  for (int i = 0; i < warmup; i++)
    policy->infer (in, &t);
  std::vector<pi0::StageTimings> runs;
  std::vector<double> plain;
  for (int i = 0; i < iters; i++) {
    policy->infer (in, &t);
    runs.push_back (t);
  }
  // Also without the per-stage synchronisation, which is what a pipeline sees.
  for (int i = 0; i < iters; i++) {
    auto t0 = std::chrono::steady_clock::now ();
    policy->infer (in, nullptr);
    plain.push_back (
        std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
            .count ());
  }
  auto stat = [&] (auto get) {
    std::vector<double> v;
    for (const auto &r : runs)
      v.push_back (get (r));
    std::sort (v.begin (), v.end ());
    double mean = 0;
    for (double x : v)
      mean += x;
    return std::array<double, 3>{v[v.size () / 2], mean / v.size (), v.front ()};
  };
  std::cout << policy->describe () << "\n";
  std::cout << "iterations: " << iters << " (after " << warmup
            << " warm-up), threads: " << at::get_num_threads () << "\n";
  std::printf ("%-22s %10s %10s %10s\n", "stage", "median ms", "mean ms", "min ms");
  auto row = [&] (const char *name, std::array<double, 3> s) {
    std::printf ("%-22s %10.3f %10.3f %10.3f\n", name, s[0], s[1], s[2]);
  };
  row ("vision (SigLIP+proj)", stat ([] (const pi0::StageTimings &r) { return r.vision_ms; }));
  row ("prefix (Gemma, KV)", stat ([] (const pi0::StageTimings &r) { return r.prefix_ms; }));
  row ("denoise (10 steps)", stat ([] (const pi0::StageTimings &r) { return r.denoise_ms; }));
  row ("total (synced stages)", stat ([] (const pi0::StageTimings &r) { return r.total_ms; }));
  std::sort (plain.begin (), plain.end ());
  double mean = 0;
  for (double x : plain)
    mean += x;
  row ("total (no stage sync)", {plain[plain.size () / 2], mean / plain.size (), plain.front ()});
  int64_t gpu_peak = pi0::cuda_peak_allocated_bytes (policy->device ());
  if (gpu_peak >= 0)
    std::printf ("peak GPU memory (allocator): %.1f MiB\n", gpu_peak / 1048576.0);
  std::printf ("peak host RSS: %.1f MiB\n", peak_rss_bytes () / 1048576.0);
  return 0;
}

} // namespace

int
main (int argc, char **argv)
{
  try {
    Args a = parse_args (argc, argv);
    if (a.has ("threads")) {
      long long n = a.get_int ("threads", 0);
      if (n < 1)
        throw pi0::Error ("--threads must be at least 1");
      at::set_num_threads (static_cast<int> (n));
    }
    if (a.command == "info")
      return cmd_info (a);
    if (a.command == "init")
      return cmd_init (a);
    if (a.command == "run")
      return cmd_run (a);
    if (a.command == "bench")
      return cmd_bench (a);
    if (a.command == "help" || a.command == "--help" || a.command == "-h") {
      std::cout << kUsage;
      return 0;
    }
    throw pi0::Error ("unknown command '" + a.command + "'");
  } catch (const pi0::Error &e) {
    std::cerr << "pi0-model: " << e.what () << "\n" << kUsage;
    return 2;
  } catch (const c10::Error &e) {
    std::cerr << "pi0-model: " << e.what_without_backtrace () << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << "pi0-model: " << e.what () << "\n";
    return 1;
  }
}
