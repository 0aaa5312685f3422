/* The native Pi0 backend of the Policy interface, input checks, dtype/device parsing. */
#include "inference/model/pi0policy.h"

#include <chrono>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>

#include "inference/model/pi0cpucache.h"
#include "inference/model/pi0cudasupport.h"
#include "inference/io/pi0error.h"
#include "inference/model/pi0model.h"

namespace pi0
{

namespace
{

std::string
shape_str (const at::Tensor &t)
{
  if (!t.defined ())
    return "(none)";
  std::ostringstream os;
  os << t.sizes ();
  return os.str ();
}

using Clock = std::chrono::steady_clock;
double
ms_since (Clock::time_point t0)
{
  return std::chrono::duration<double, std::milli> (Clock::now () - t0).count ();
}

} // namespace

at::ScalarType
parse_dtype (const std::string &name)
{
  if (name == "fp32" || name == "float32" || name == "float")
    return at::kFloat;
  if (name == "bf16" || name == "bfloat16")
    return at::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "half")
    throw Error ("float16 is refused: Pi0's activations overflow fp16 (known to break Pi0, e.g. "
                 "TensorRT FP16 "
                 "builds); use bf16 (CUDA) or fp32");
  throw Error ("unknown precision '" + name + "' (use fp32 or bf16)");
}

bool
cuda_available ()
{
  return at::hasCUDA () && at::globalContext ().hasCUDA ();
}

c10::Device
parse_device (const std::string &name)
{
  c10::Device d (c10::kCPU);
  try {
    d = c10::Device (name);
  } catch (const std::exception &) {
    throw Error ("unknown device '" + name + "' (use cpu, cuda or cuda:N)");
  }
  if (d.is_cuda () && !cuda_available ())
    throw Error ("device '" + name +
                 "' asked for, but no CUDA device is available to LibTorch here");
  if (!d.is_cuda () && !d.is_cpu ())
    throw Error ("unsupported device '" + name + "' (use cpu, cuda or cuda:N)");
  return d;
}

void
Policy::warmup ()
{
  const PolicySpec &s = spec ();
  if (!s.num_views || !s.image_size || !s.max_tokens || !s.state_dim || !s.horizon || !s.action_dim)
    return;
  PolicyInput in;
  in.images = at::zeros ({s.num_views, 3, s.image_size, s.image_size});
  in.image_masks = at::ones ({s.num_views}, at::kBool);
  in.tokens = at::zeros ({s.max_tokens}, at::kLong);
  in.token_mask = at::arange (s.max_tokens) < 1;
  in.state = at::zeros ({s.state_dim});
  in.noise = at::zeros ({s.horizon, s.action_dim});
  infer (in);
}

std::vector<at::Tensor>
Policy::infer_batch (const std::vector<PolicyInput> &inputs)
{
  std::vector<at::Tensor> out;
  out.reserve (inputs.size ());
  for (const auto &in : inputs)
    out.push_back (infer (in));
  return out;
}

at::Tensor
noise_from_seed (uint64_t seed, int64_t horizon, int64_t action_dim)
{
  auto gen = at::make_generator<at::CPUGeneratorImpl> (seed);
  return at::empty ({horizon, action_dim}, at::TensorOptions ().dtype (at::kFloat))
      .normal_ (0.0, 1.0, gen);
}

namespace
{

/* Checks one observation against the spec and returns it batched (leading 1), on `device`. */
struct Batched {
  at::Tensor images, image_masks, tokens, token_mask, state, noise;
};

Batched
check_and_batch (const PolicyInput &in, const PolicySpec &spec, const c10::Device &device,
                 int64_t vocab_size)
{
  auto bad = [] (const std::string &what) {
    throw Error ("policy input: " + what);
  };
  if (!in.images.defined () || in.images.dim () != 4 || in.images.size (1) != 3)
    bad ("images must be float [V,3,H,W], got " + shape_str (in.images));
  if (!at::isFloatingType (in.images.scalar_type ()))
    bad ("images must be floating point in [-1,1]");
  const int64_t v = in.images.size (0);
  if (spec.num_views && v != spec.num_views)
    bad ("expected " + std::to_string (spec.num_views) + " views, got " + std::to_string (v));
  if (spec.image_size &&
      (in.images.size (2) != spec.image_size || in.images.size (3) != spec.image_size))
    bad ("views must be " + std::to_string (spec.image_size) + "x" +
         std::to_string (spec.image_size) + ", got " + shape_str (in.images));
  at::Tensor masks = in.image_masks.defined () ? in.image_masks : at::ones ({v}, at::kBool);
  if (masks.dim () != 1 || masks.size (0) != v)
    bad ("image_masks must be [" + std::to_string (v) + "], got " + shape_str (masks));
  if (!in.tokens.defined () || in.tokens.dim () != 1)
    bad ("tokens must be int [L], got " + shape_str (in.tokens));
  if (!at::isIntegralType (in.tokens.scalar_type (), false))
    bad ("tokens must be integer ids");
  if (spec.max_tokens && in.tokens.size (0) != spec.max_tokens)
    bad ("expected " + std::to_string (spec.max_tokens) + " tokens (padded), got " +
         std::to_string (in.tokens.size (0)));
  if (!in.token_mask.defined () || in.token_mask.sizes () != in.tokens.sizes ())
    bad ("token_mask must match tokens " + shape_str (in.tokens) + ", got " +
         shape_str (in.token_mask));
  if (vocab_size > 0 && in.tokens.numel () > 0) {
    at::Tensor t = in.tokens.to (at::kCPU);
    int64_t lo = t.min ().item<int64_t> (), hi = t.max ().item<int64_t> ();
    if (lo < 0 || hi >= vocab_size)
      bad ("token id out of range [0," + std::to_string (vocab_size) +
           "): " + std::to_string (lo < 0 ? lo : hi));
  }
  if (!in.state.defined () || in.state.dim () != 1)
    bad ("state must be float [S], got " + shape_str (in.state));
  at::Tensor state = in.state.to (at::kFloat);
  if (spec.state_dim) {
    if (state.size (0) > spec.state_dim)
      bad ("state has " + std::to_string (state.size (0)) + " dims, the model takes at most " +
           std::to_string (spec.state_dim));
    if (state.size (0) < spec.state_dim) // openpi's PadStatesAndActions
      state = at::constant_pad_nd (state, {0, spec.state_dim - state.size (0)}, 0.0);
  }
  at::Tensor noise;
  if (in.noise.defined ()) {
    if (in.noise.dim () != 2 || (spec.horizon && in.noise.size (0) != spec.horizon) ||
        (spec.action_dim && in.noise.size (1) != spec.action_dim))
      bad ("noise must be [" + std::to_string (spec.horizon) + "," +
           std::to_string (spec.action_dim) + "], got " + shape_str (in.noise));
    noise = in.noise.to (at::kFloat);
  } else {
    noise = noise_from_seed (in.seed, spec.horizon, spec.action_dim);
  }
  Batched b;
  b.images = in.images.to (device, at::kFloat).unsqueeze (0);
  b.image_masks = masks.to (device, at::kBool).unsqueeze (0);
  b.tokens = in.tokens.to (device, at::kLong).unsqueeze (0);
  b.token_mask = in.token_mask.to (device, at::kBool).unsqueeze (0);
  b.state = state.to (device).unsqueeze (0);
  b.noise = noise.to (device).unsqueeze (0);
  return b;
}

class Pi0Policy final : public Policy
{
public:
  Pi0Policy (std::shared_ptr<Pi0Model> model, const PolicyOptions &opts)
      : model_ (std::move (model)), opts_ (opts)
  {
    if (opts_.device.is_cuda () && !opts_.device.has_index ())
      opts_.device = c10::Device (c10::kCUDA, 0);
    if (opts_.device.is_cuda () && !cuda_available ())
      throw Error ("CUDA device requested but not available");
    if (opts_.device.is_cpu ())
      install_cpu_block_cache ();
    model_->set_precision (opts_.device, opts_.dtype);
    // On CUDA, SDPA's fused kernels (fp32 accumulation inside) replace the explicit softmax.
    model_->set_attention_impl (opts_.device.is_cuda () ? AttentionImpl::Sdpa
                                                        : AttentionImpl::Eager);
    model_->eval ();
    const Pi0Config &c = model_->config ();
    spec_ = PolicySpec{c.num_views,
                       c.vision.image_size,
                       c.max_tokens,
                       c.state_dim,
                       c.action_dim,
                       c.horizon,
                       c.pi05 && c.discrete_state_input,
                       c.uses_state (),
                       c.type_name ()};
    use_graph_ = opts_.device.is_cuda () && opts_.cuda_graph && cuda_graphs_built ();
  }

  bool supports_guidance () const override { return true; }

  at::Tensor infer (const PolicyInput &input, StageTimings *timings) override
  {
    c10::InferenceMode guard;
    Batched b = check_and_batch (input, spec_, opts_.device, model_->config ().vocab_size);
    return infer_one (b, input.guidance, timings);
  }

  /* Several observations, one forward pass: every input is checked first (a bad one fails the
   * call before anything runs), then the inputs are stacked along the batch and run as one
   * embed_prefix + prefill + denoising loop. Each keeps its own noise (its seed's, drawn on the
   * CPU as alone), prompt, masks and state; attention, norms and the Euler steps act per batch
   * row, so each chunk is the one it gets alone up to the floating-point reordering of a larger
   * GEMM (tests/libs/inference/test_openpolicy.cpp bounds it). Unguided inputs run together; guided ones run
   * together when their guidance settings (delay, execution horizon, beta, Jacobian, prefix rows)
   * are the same, since RtcGuidance holds those once per batch; a group of one runs as infer()
   * does (on CUDA, its captured graph). Stacked batches run eagerly (no CUDA graph yet). */
  std::vector<at::Tensor> infer_batch (const std::vector<PolicyInput> &inputs) override
  {
    c10::InferenceMode guard;
    std::vector<Batched> bs;
    bs.reserve (inputs.size ());
    for (const auto &in : inputs)
      bs.push_back (check_and_batch (in, spec_, opts_.device, model_->config ().vocab_size));
    std::vector<at::Tensor> out (inputs.size ());
    std::vector<bool> done (inputs.size (), false);
    for (size_t i = 0; i < inputs.size (); i++) {
      if (done[i])
        continue;
      std::vector<size_t> group{i};
      for (size_t j = i + 1; j < inputs.size (); j++)
        if (!done[j] && same_kind (inputs[i].guidance, inputs[j].guidance))
          group.push_back (j);
      for (size_t k : group)
        done[k] = true;
      if (group.size () == 1) {
        out[i] = infer_one (bs[i], inputs[i].guidance, nullptr);
        continue;
      }
      std::vector<at::Tensor> im, ma, to, tm, st, no, pre;
      for (size_t k : group) {
        im.push_back (bs[k].images);
        ma.push_back (bs[k].image_masks);
        to.push_back (bs[k].tokens);
        tm.push_back (bs[k].token_mask);
        st.push_back (bs[k].state);
        no.push_back (bs[k].noise);
        if (inputs[k].guidance.prefix.defined ())
          pre.push_back (inputs[k].guidance.prefix.unsqueeze (0));
      }
      PrefixCache cache = model_->prefill (
          model_->embed_prefix (at::cat (im), at::cat (ma), at::cat (to), at::cat (tm)));
      at::Tensor state = at::cat (st), x = at::cat (no);
      if (pre.empty ()) {
        model_->denoise_loop (cache, state, x);
      } else {
        RtcGuidance rtc = rtc_of (inputs[i].guidance);
        rtc.prefix = at::cat (pre).to (opts_.device, at::kFloat);
        model_->denoise_loop_guided (cache, state, x, rtc);
      }
      at::Tensor host = x.to (at::kCPU); // the copy to the host synchronises
      for (size_t n = 0; n < group.size (); n++)
        out[group[n]] = host[static_cast<int64_t> (n)].clone ();
    }
    return out;
  }

  /* Whether two inputs can share one guided (or unguided) forward pass. */
  static bool same_kind (const PolicyGuidance &a, const PolicyGuidance &b)
  {
    if (a.prefix.defined () != b.prefix.defined ())
      return false;
    if (!a.prefix.defined ())
      return true;
    return a.prefix.sizes () == b.prefix.sizes () && a.delay == b.delay &&
           a.execution_horizon == b.execution_horizon &&
           a.max_guidance_weight == b.max_guidance_weight &&
           a.identity_jacobian == b.identity_jacobian && a.schedule == b.schedule;
  }

  /* One checked, batched (leading 1) observation. */
  at::Tensor infer_one (const Batched &b, const PolicyGuidance &guidance, StageTimings *timings)
  {
    if (guidance.prefix.defined ())
      return infer_guided (b, guidance);
    if (use_graph_ && !timings) {
      // The whole observation -> actions computation is one captured graph: per call, six small
      // host-to-device copies, one replay, one copy back.
      copy_in (b);
      if (!full_graph_)
        full_graph_ = std::make_unique<CapturedGraph> (
            [this] {
              PrefixCache cache = model_->prefill (
                  model_->embed_prefix (g_images_, g_masks_, g_tokens_, g_token_mask_));
              g_x_.copy_ (g_noise_);
              model_->denoise_loop (cache, g_state_, g_x_);
            },
            opts_.device);
      full_graph_->replay ();
      return g_x_.squeeze (0).to (at::kCPU).clone ();
    }
    auto sync = [&] {
      if (timings)
        synchronize_device (opts_.device);
    };
    auto t0 = Clock::now ();
    // Stage 1: SigLIP on every view + projector, and the token embedding.
    PrefixEmbedding prefix = model_->embed_prefix (b.images, b.image_masks, b.tokens, b.token_mask);
    sync ();
    auto t1 = Clock::now ();
    // Stage 2: the prefix expert once, keeping K/V for every layer.
    PrefixCache cache = model_->prefill (prefix);
    sync ();
    auto t2 = Clock::now ();
    // Stage 3: 10 Euler steps of the action expert over the cached prefix.
    at::Tensor actions;
    if (use_graph_) {
      copy_in (b);
      if (!denoise_graph_) {
        for (size_t l = 0; l < cache.keys.size (); l++) {
          g_cache_.keys.push_back (cache.keys[l].clone ());
          g_cache_.values.push_back (cache.values[l].clone ());
        }
        g_cache_.mask = cache.mask.clone ();
        denoise_graph_ = std::make_unique<CapturedGraph> (
            [this] {
              g_x_.copy_ (g_noise_);
              model_->denoise_loop (g_cache_, g_state_, g_x_);
            },
            opts_.device);
      }
      for (size_t l = 0; l < cache.keys.size (); l++) {
        g_cache_.keys[l].copy_ (cache.keys[l]);
        g_cache_.values[l].copy_ (cache.values[l]);
      }
      g_cache_.mask.copy_ (cache.mask);
      denoise_graph_->replay ();
      actions = g_x_;
    } else {
      actions = b.noise.clone ();
      model_->denoise_loop (cache, b.state, actions);
    }
    at::Tensor out =
        actions.squeeze (0).to (at::kCPU).clone (); // the copy to the host synchronises
    if (timings) {
      auto t3 = Clock::now ();
      timings->vision_ms = std::chrono::duration<double, std::milli> (t1 - t0).count ();
      timings->prefix_ms = std::chrono::duration<double, std::milli> (t2 - t1).count ();
      timings->denoise_ms = std::chrono::duration<double, std::milli> (t3 - t2).count ();
      timings->total_ms = ms_since (t0);
    }
    return out;
  }

  const PolicySpec &spec () const override { return spec_; }
  c10::Device device () const override { return opts_.device; }
  at::ScalarType dtype () const override { return opts_.dtype; }

  /* RTC: eager (no CUDA graph: the VJP needs autograd, and the prefix changes every call). */
  static RtcGuidance rtc_of (const PolicyGuidance &g)
  {
    RtcGuidance rtc;
    rtc.delay = g.delay;
    rtc.execution_horizon = g.execution_horizon;
    rtc.max_guidance_weight = g.max_guidance_weight;
    rtc.jacobian = g.identity_jacobian ? RtcJacobian::Identity : RtcJacobian::Vjp;
    rtc.schedule = g.schedule;
    return rtc;
  }

  at::Tensor infer_guided (const Batched &b, const PolicyGuidance &g)
  {
    RtcGuidance rtc = rtc_of (g);
    rtc.prefix = g.prefix.to (opts_.device, at::kFloat);
    PrefixCache cache =
        model_->prefill (model_->embed_prefix (b.images, b.image_masks, b.tokens, b.token_mask));
    at::Tensor x = b.noise.clone ();
    model_->denoise_loop_guided (cache, b.state, x, rtc);
    return x.squeeze (0).to (at::kCPU).clone ();
  }

  /* The graphs read fixed buffers: allocate them once, then copy each observation in. */
  void copy_in (const Batched &b)
  {
    if (!g_images_.defined ()) {
      g_images_ = b.images.clone ();
      g_masks_ = b.image_masks.clone ();
      g_tokens_ = b.tokens.clone ();
      g_token_mask_ = b.token_mask.clone ();
      g_state_ = b.state.clone ();
      g_noise_ = b.noise.clone ();
      g_x_ = b.noise.clone ();
      return;
    }
    g_images_.copy_ (b.images);
    g_masks_.copy_ (b.image_masks);
    g_tokens_.copy_ (b.tokens);
    g_token_mask_.copy_ (b.token_mask);
    g_state_.copy_ (b.state);
    g_noise_.copy_ (b.noise);
  }

  std::string describe () const override
  {
    std::ostringstream os;
    os << model_->config ().type_name () << " native (" << model_->config ().name << "), device "
       << opts_.device << ", " << c10::toString (opts_.dtype)
       << (use_graph_ ? ", CUDA graph" : ", eager");
    return os.str ();
  }

private:
  std::shared_ptr<Pi0Model> model_;
  PolicyOptions opts_;
  PolicySpec spec_;
  bool use_graph_ = false;
  // CUDA graphs: the whole inference (fast path), and the denoising loop alone (used when stage
  // timings are asked for, so that vision and prefix can be timed apart).
  std::unique_ptr<CapturedGraph> full_graph_, denoise_graph_;
  at::Tensor g_images_, g_masks_, g_tokens_, g_token_mask_, g_state_, g_noise_, g_x_;
  PrefixCache g_cache_;
};

} // namespace

std::unique_ptr<Policy>
make_pi0_policy (std::shared_ptr<Pi0Model> model, const PolicyOptions &options)
{
  if (!model)
    throw Error ("make_pi0_policy: no model");
  return std::make_unique<Pi0Policy> (std::move (model), options);
}

std::unique_ptr<Policy>
load_pi0_policy (const std::string &path, const PolicyOptions &options)
{
  return make_pi0_policy (load_pi0_model (path), options);
}

std::unique_ptr<Policy>
load_policy (const std::string &path, const PolicyOptions &options)
{
  auto ends_with = [&] (const std::string &suffix) {
    return path.size () >= suffix.size () &&
           path.compare (path.size () - suffix.size (), suffix.size (), suffix) == 0;
  };
  if (ends_with (".pt") || ends_with (".ts") || ends_with (".torchscript"))
    return load_torchscript_policy (path, options);
  return load_pi0_policy (path, options);
}

} // namespace pi0
