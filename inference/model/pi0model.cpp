/* Pi0Model (pi0model.h): the rules (attention masks, RoPE, the time embedding), the module tree
 * under its checkpoint names, the mixed-precision layout, and the forward passes: the prefix
 * (images and language through SigLIP and the prefix expert, its K/V cached), the suffix (state,
 * actions and time through the action expert, attending that cache) and the plain flow-matching
 * sampler. The guided sampler is pi0rtcguidance.cpp's; the layers are pi0layers.cpp's. */
#include "inference/model/pi0model.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "inference/io/pi0error.h"

namespace pi0
{

/* ---- rules ---- */

at::Tensor
make_attention_mask (const at::Tensor &pad_mask, const at::Tensor &ar_mask)
{
  TORCH_CHECK (pad_mask.dim () == 2, "pad_mask must be [B,N]");
  at::Tensor ar = ar_mask.to (at::kLong);
  if (ar.dim () == 1)
    ar = ar.unsqueeze (0).expand ({pad_mask.size (0), ar.size (0)});
  TORCH_CHECK (ar.sizes () == pad_mask.sizes (), "ar_mask must match pad_mask");
  at::Tensor cum = at::cumsum (ar, 1);
  at::Tensor causal = cum.unsqueeze (1) <= cum.unsqueeze (2); // [b,i,j]: cum[j] <= cum[i]
  at::Tensor pad = pad_mask.to (at::kBool);
  at::Tensor valid = pad.unsqueeze (1).logical_and (pad.unsqueeze (2)); // both tokens real
  return causal.logical_and (valid);
}

at::Tensor
positions_from_mask (const at::Tensor &pad_mask)
{
  return at::cumsum (pad_mask.to (at::kLong), 1) - 1;
}

namespace
{

/* cos/sin of positions * theta^(-2k/d), [B,1,N,d/2] fp32: computed once per forward and shared by
 * every layer and by q and k. */
struct RopeTables {
  at::Tensor cos, sin;
};

RopeTables
rope_tables (const at::Tensor &positions, int64_t d, double theta)
{
  auto fopts = positions.options ().dtype (at::kFloat);
  at::Tensor inv_freq =
      at::reciprocal (at::pow (theta, at::arange (0, d, 2, fopts) / static_cast<double> (d)));
  at::Tensor freqs = positions.to (at::kFloat).unsqueeze (-1) * inv_freq; // [B,N,d/2]
  return {freqs.cos ().unsqueeze (1), freqs.sin ().unsqueeze (1)};
}

at::Tensor
rotate (const at::Tensor &x, const RopeTables &t)
{
  const int64_t half = x.size (-1) / 2;
  at::Tensor xf = x.to (at::kFloat);
  at::Tensor x1 = xf.narrow (-1, 0, half), x2 = xf.narrow (-1, half, half);
  return at::cat ({x1 * t.cos - x2 * t.sin, x2 * t.cos + x1 * t.sin}, -1);
}

} // namespace

at::Tensor
apply_rope (const at::Tensor &x, const at::Tensor &positions, double theta)
{
  return rotate (x, rope_tables (positions, x.size (-1), theta));
}

at::Tensor
time_embedding (const at::Tensor &t, int64_t dim, double min_period, double max_period)
{
  TORCH_CHECK (dim % 2 == 0 && t.dim () == 1, "time_embedding: even dim and t [B] expected");
  auto dopts = t.options ().dtype (at::kDouble);
  at::Tensor fraction = at::linspace (0.0, 1.0, dim / 2, dopts);
  at::Tensor period = min_period * at::pow (max_period / min_period, fraction);
  at::Tensor x = (2.0 * M_PI / period).unsqueeze (0) * t.to (at::kDouble).unsqueeze (1);
  return at::cat ({x.sin (), x.cos ()}, 1).to (at::kFloat);
}

at::Tensor
suffix_ar_mask (int64_t horizon, const at::Device &device, bool state_token)
{
  // Built on the device from arange so that it is capturable in a CUDA graph (no host copy).
  const auto opts = at::TensorOptions ().dtype (at::kLong).device (device);
  return state_token ? at::arange (1 + horizon, opts) <= 1 : at::arange (horizon, opts) < 1;
}

/* ---- the model ---- */

Pi0Model::Pi0Model (const Pi0Config &config, const at::TensorOptions &opts_in) : cfg_ (config)
{
  cfg_.validate ();
  at::TensorOptions opts = opts_in.dtype (at::kFloat);
  device_ = opts.device ();
  using namespace layers;
  pwe_ = register_module ("paligemma_with_expert", std::make_shared<Container> ());
  paligemma_ = pwe_->register_module ("paligemma", std::make_shared<Container> ());
  paligemma_model_ = paligemma_->register_module ("model", std::make_shared<Container> ());
  vision_tower_ =
      paligemma_model_->register_module ("vision_tower", std::make_shared<Container> ());
  vision_ = vision_tower_->register_module (
      "vision_model", std::make_shared<SiglipVisionModel> (cfg_.vision, opts));
  projector_ =
      paligemma_model_->register_module ("multi_modal_projector", std::make_shared<Container> ());
  projector_linear_ = projector_->register_module (
      "linear", std::make_shared<Linear> (cfg_.vision.width, cfg_.text.width, true, opts));
  text_ = paligemma_model_->register_module (
      "language_model",
      std::make_shared<GemmaStack> (cfg_.text, cfg_.vocab_size, cfg_.rms_norm_eps, opts));
  const int64_t ew = cfg_.expert.width;
  expert_ = pwe_->register_module ("gemma_expert", std::make_shared<Container> ());
  // pi0.5: the action expert's norms are conditioned on the time (cond width = expert width).
  action_expert_ = expert_->register_module (
      "model",
      std::make_shared<GemmaStack> (cfg_.expert, 0, cfg_.rms_norm_eps, opts, cfg_.pi05 ? ew : 0));
  experts_ = {text_, action_expert_};

  action_in_proj = register_module ("action_in_proj",
                                    std::make_shared<Linear> (cfg_.action_dim, ew, true, opts));
  action_out_proj = register_module ("action_out_proj",
                                     std::make_shared<Linear> (ew, cfg_.action_dim, true, opts));
  if (cfg_.pi05) {
    time_mlp_in = register_module ("time_mlp_in", std::make_shared<Linear> (ew, ew, true, opts));
    time_mlp_out = register_module ("time_mlp_out", std::make_shared<Linear> (ew, ew, true, opts));
    return;
  }
  state_proj =
      register_module ("state_proj", std::make_shared<Linear> (cfg_.state_dim, ew, true, opts));
  action_time_mlp_in =
      register_module ("action_time_mlp_in", std::make_shared<Linear> (2 * ew, ew, true, opts));
  action_time_mlp_out =
      register_module ("action_time_mlp_out", std::make_shared<Linear> (ew, ew, true, opts));
}

int64_t
Pi0Model::num_parameters () const
{
  int64_t n = 0;
  for (const auto &p : parameters ())
    n += p.numel ();
  return n;
}

void
Pi0Model::init_random (uint64_t seed)
{
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl> (seed);
  auto cpu = at::TensorOptions ().dtype (at::kFloat);
  // Values are drawn on the CPU in parameter order, so a seed gives the same weights everywhere.
  auto fill = [&] (at::Tensor &p, at::Tensor v) {
    if (p.device ().type () != at::kMeta)
      p.copy_ (v);
  };
  auto uniform = [&] (at::IntArrayRef shape, double bound) {
    return at::empty (shape, cpu).uniform_ (-bound, bound, gen);
  };
  auto normal = [&] (at::IntArrayRef shape, double std) {
    return at::empty (shape, cpu).normal_ (0.0, std, gen);
  };
  for (const auto &m : modules (/*include_self=*/false)) {
    torch::nn::Module *raw = m.get ();
    if (auto *l = dynamic_cast<layers::Linear *> (raw)) {
      double bound = 1.0 / std::sqrt (static_cast<double> (l->weight.size (1)));
      fill (l->weight, uniform (l->weight.sizes (), bound));
      if (l->bias.defined ())
        fill (l->bias, uniform (l->bias.sizes (), 0.1 * bound));
    } else if (auto *c = dynamic_cast<layers::Conv2d *> (raw)) {
      double bound = 1.0 / std::sqrt (static_cast<double> (c->weight[0].numel ()));
      fill (c->weight, uniform (c->weight.sizes (), bound));
      fill (c->bias, uniform (c->bias.sizes (), 0.1 * bound));
    } else if (auto *e = dynamic_cast<layers::Embedding *> (raw)) {
      fill (e->weight, normal (e->weight.sizes (),
                               1.0 / std::sqrt (static_cast<double> (e->weight.size (1)))));
    } else if (auto *n = dynamic_cast<layers::LayerNorm *> (raw)) {
      fill (n->weight, normal (n->weight.sizes (), 0.1) + 1.0);
      fill (n->bias, normal (n->bias.sizes (), 0.02));
    } else if (auto *r = dynamic_cast<layers::RMSNorm *> (raw)) {
      // Non-zero scales so that the (1 + scale) rule is exercised by every test. An adaptive
      // norm has none: its `dense` is a Linear, drawn above (non-zero, unlike LeRobot's
      // zero init, so that the time conditioning is exercised too).
      if (r->weight.defined ())
        fill (r->weight, normal (r->weight.sizes (), 0.1));
    }
  }
}

void
Pi0Model::set_precision (const at::Device &device, at::ScalarType dtype)
{
  if (dtype == at::kHalf)
    throw Error ("float16 is not supported for Pi0: its activations overflow fp16 (TensorRT FP16 "
                 "builds of pi0 fail "
                 "the same way); use bfloat16 on CUDA or float32");
  if (dtype != at::kFloat && dtype != at::kBFloat16)
    throw Error (std::string ("unsupported model dtype ") + c10::toString (dtype) +
                 " (use float32 or bfloat16)");
  at::NoGradGuard no_grad;
  for (auto &item : named_parameters ()) {
    const std::string &name = item.key ();
    at::Tensor &p = item.value ();
    // The mixed-precision layout of openpi/LeRobot: norms, patch/position embeddings and the
    // small state/action/time projections stay fp32; everything in the two Gemmas and the
    // SigLIP blocks takes `dtype`.
    bool keep_fp32 = name.rfind ("paligemma_with_expert.", 0) != 0 ||
                     name.find ("norm") != std::string::npos ||
                     name.find ("patch_embedding") != std::string::npos ||
                     name.find ("position_embedding") != std::string::npos;
    p.set_data (p.data ().to (device, keep_fp32 ? at::kFloat : dtype));
  }
  device_ = device;
  dtype_ = dtype;
}

at::Tensor
Pi0Model::embed_images (const at::Tensor &images) const
{
  TORCH_CHECK (images.dim () == 5, "images must be [B,V,3,H,W]");
  const int64_t b = images.size (0), v = images.size (1);
  at::Tensor feats = vision_->forward (images.flatten (0, 1));
  feats = projector_linear_->forward (feats).to (dtype_);
  return feats.reshape ({b, v * feats.size (1), feats.size (2)});
}

at::Tensor
Pi0Model::embed_tokens (const at::Tensor &tokens) const
{
  const at::Tensor &w = text_->embed_tokens->weight;
  // sqrt(width) applies to language embeddings only (openpi removes PaliGemma's image scaling);
  // the factor is rounded to the weight dtype as transformers' scaled embedding does.
  at::Tensor scale =
      at::scalar_tensor (std::sqrt (static_cast<double> (cfg_.text.width)), w.options ());
  return (at::embedding (w, tokens) * scale).to (dtype_);
}

PrefixEmbedding
Pi0Model::embed_prefix (const at::Tensor &images, const at::Tensor &image_masks,
                        const at::Tensor &tokens, const at::Tensor &token_mask) const
{
  const int64_t b = images.size (0), v = images.size (1), n = cfg_.vision.num_patches ();
  at::Tensor img = embed_images (images);
  // A masked view is still encoded (fixed shapes) but its tokens are excluded from attention and
  // from position counting, so its content cannot reach the actions.
  at::Tensor img_mask =
      image_masks.to (at::kBool).unsqueeze (-1).expand ({b, v, n}).reshape ({b, v * n});
  PrefixEmbedding p;
  p.embeddings = at::cat ({img, embed_tokens (tokens)}, 1);
  p.mask = at::cat ({img_mask, token_mask.to (at::kBool)}, 1);
  return p;
}

at::Tensor
Pi0Model::attention (const at::Tensor &q, const at::Tensor &k_in, const at::Tensor &v_in,
                     const at::Tensor &mask) const
{
  const int64_t b = q.size (0), h = q.size (1), kvh = k_in.size (1), nk = k_in.size (2),
                d = q.size (3);
  at::Tensor k = k_in, v = v_in;
  if (kvh != h) { // multi-query: query head i reads kv head i / (h / kvh)
    k = k.unsqueeze (2).expand ({b, kvh, h / kvh, nk, d}).reshape ({b, h, nk, d});
    v = v.unsqueeze (2).expand ({b, kvh, h / kvh, nk, d}).reshape ({b, h, nk, d});
  }
  const double scale = 1.0 / std::sqrt (static_cast<double> (d));
  at::Tensor allowed = mask.unsqueeze (1);
  if (attn_impl_ == AttentionImpl::Sdpa) {
    at::Tensor bias = at::zeros (allowed.sizes (), q.options ().dtype (dtype_))
                          .masked_fill_ (allowed.logical_not (), kMaskedLogit);
    return at::scaled_dot_product_attention (q.to (dtype_), k.to (dtype_), v, bias, 0.0, false,
                                             scale);
  }
  // Logits and softmax in fp32 whatever the weights are (openpi's preferred_element_type=f32).
  at::Tensor logits = at::matmul (q.to (at::kFloat), k.to (at::kFloat).transpose (-1, -2)) * scale;
  logits.masked_fill_ (allowed.logical_not (), kMaskedLogit);
  at::Tensor probs = at::softmax (logits, -1);
  return at::matmul (probs.to (v.scalar_type ()), v);
}

std::vector<at::Tensor>
Pi0Model::run_layers (const std::vector<at::Tensor> &inputs, const at::Tensor &mask,
                      const at::Tensor &positions, const PrefixCache *cache_in,
                      PrefixCache *cache_out, std::vector<at::Tensor> *hidden_states,
                      bool final_norm, const at::Tensor &cond) const
{
  // cond: pi0.5's time condition for the action expert (expert 1); the prefix expert has none.
  auto cond_of = [&] (size_t e) {
    return e == 1 ? cond : at::Tensor ();
  };
  const GemmaConfig &g = cfg_.text; // heads, kv heads and head dim are shared by both experts
  std::vector<at::Tensor> xs = inputs;
  for (auto &x : xs)
    if (x.defined ())
      x = x.to (dtype_);
  if (hidden_states)
    for (auto &x : xs)
      if (x.defined ())
        hidden_states->push_back (x);
  const RopeTables rope = rope_tables (positions, g.head_dim, cfg_.rope_theta);
  for (int l = 0; l < g.depth; l++) {
    std::vector<at::Tensor> qs, ks, vs;
    std::vector<int64_t> lens;
    std::vector<at::Tensor> gates (xs.size ()); // adaptive norms' residual gates (pi0.5)
    for (size_t e = 0; e < xs.size (); e++) {
      if (!xs[e].defined ())
        continue;
      const auto &layer = *experts_[e]->layers[l];
      at::Tensor h = layer.input_layernorm->forward (xs[e], cond_of (e), &gates[e]);
      const int64_t b = h.size (0), n = h.size (1);
      qs.push_back (layer.self_attn->q_proj->forward (h)
                        .view ({b, n, g.num_heads, g.head_dim})
                        .transpose (1, 2));
      ks.push_back (layer.self_attn->k_proj->forward (h)
                        .view ({b, n, g.num_kv_heads, g.head_dim})
                        .transpose (1, 2));
      vs.push_back (layer.self_attn->v_proj->forward (h)
                        .view ({b, n, g.num_kv_heads, g.head_dim})
                        .transpose (1, 2));
      lens.push_back (n);
    }
    // One attention over the experts' tokens concatenated along the sequence.
    at::Tensor q = rotate (qs.size () == 1 ? qs[0] : at::cat (qs, 2), rope);
    at::Tensor k = rotate (ks.size () == 1 ? ks[0] : at::cat (ks, 2), rope).to (dtype_);
    at::Tensor v = vs.size () == 1 ? vs[0] : at::cat (vs, 2);
    if (cache_in) {
      k = at::cat ({cache_in->keys[l], k}, 2);
      v = at::cat ({cache_in->values[l], v}, 2);
    }
    if (cache_out) {
      cache_out->keys.push_back (k);
      cache_out->values.push_back (v);
    }
    at::Tensor att = attention (q, k, v, mask);
    const int64_t b = att.size (0), nq = att.size (2);
    att = att.transpose (1, 2).reshape ({b, nq, g.num_heads * g.head_dim});
    int64_t offset = 0;
    size_t i = 0;
    for (size_t e = 0; e < xs.size (); e++) {
      if (!xs[e].defined ())
        continue;
      const auto &layer = *experts_[e]->layers[l];
      auto gated = [] (const at::Tensor &y, const at::Tensor &gate) {
        return gate.defined () ? y * gate : y;
      };
      at::Tensor x =
          xs[e] +
          gated (layer.self_attn->o_proj->forward (att.narrow (1, offset, lens[i])).to (dtype_),
                 gates[e]);
      at::Tensor gate2;
      at::Tensor h2 = layer.post_attention_layernorm->forward (x, cond_of (e), &gate2);
      x = x + gated (layer.mlp->forward (h2).to (dtype_), gate2);
      xs[e] = x;
      offset += lens[i++];
      if (hidden_states)
        hidden_states->push_back (x);
    }
  }
  if (final_norm)
    for (size_t e = 0; e < xs.size (); e++)
      if (xs[e].defined ()) // the final norm's gate is unused (no residual after it)
        xs[e] = experts_[e]->norm->forward (xs[e], cond_of (e), nullptr);
  return xs;
}

PrefixCache
Pi0Model::prefill (const PrefixEmbedding &prefix) const
{
  PrefixCache cache;
  at::Tensor zeros = at::zeros ({prefix.mask.size (1)}, prefix.mask.options ().dtype (at::kLong));
  at::Tensor mask = make_attention_mask (prefix.mask, zeros); // prefix: fully bidirectional
  run_layers ({prefix.embeddings, at::Tensor ()}, mask, positions_from_mask (prefix.mask), nullptr,
              &cache, nullptr, false);
  cache.mask = prefix.mask;
  return cache;
}

at::Tensor
Pi0Model::time_condition (const at::Tensor &t) const
{
  if (!cfg_.pi05)
    return at::Tensor ();
  at::Tensor te = time_embedding (t, cfg_.expert.width, cfg_.min_period, cfg_.max_period);
  return at::silu (time_mlp_out->forward (at::silu (time_mlp_in->forward (te))));
}

at::Tensor
Pi0Model::embed_suffix (const at::Tensor &state, const at::Tensor &x_t, const at::Tensor &t) const
{
  if (cfg_.pi05) // the time enters through the norms (time_condition), the state not at all
    return action_in_proj->forward (x_t.to (at::kFloat)).to (dtype_);
  const int64_t b = x_t.size (0), horizon = x_t.size (1), ew = cfg_.expert.width;
  at::Tensor state_tok = state_proj->forward (state.to (at::kFloat)).unsqueeze (1);
  at::Tensor a = action_in_proj->forward (x_t.to (at::kFloat));
  at::Tensor te = time_embedding (t, ew, cfg_.min_period, cfg_.max_period).to (a.scalar_type ());
  at::Tensor at_in = at::cat ({a, te.unsqueeze (1).expand ({b, horizon, ew})}, 2);
  at::Tensor h = action_time_mlp_out->forward (at::silu (action_time_mlp_in->forward (at_in)));
  return at::cat ({state_tok.to (h.scalar_type ()), h}, 1).to (dtype_);
}

Pi0Model::SuffixLayout
Pi0Model::suffix_layout (const PrefixCache &cache) const
{
  const int64_t b = cache.mask.size (0), s = cfg_.suffix_len (), p = cache.mask.size (1);
  at::Tensor suffix_pad = at::ones ({b, s}, cache.mask.options ());
  at::Tensor self_mask = make_attention_mask (
      suffix_pad, suffix_ar_mask (cfg_.horizon, cache.mask.device (), !cfg_.pi05));
  at::Tensor to_prefix = cache.mask.unsqueeze (1).expand ({b, s, p});
  SuffixLayout layout;
  layout.mask = at::cat ({to_prefix, self_mask}, 2);
  // Suffix positions continue after the valid prefix tokens (padding does not advance them).
  layout.positions = cache.mask.to (at::kLong).sum (-1, true) + positions_from_mask (suffix_pad);
  return layout;
}

at::Tensor
Pi0Model::denoise_step (const PrefixCache &cache, const at::Tensor &state, const at::Tensor &x_t,
                        const at::Tensor &t) const
{
  return denoise_step (cache, suffix_layout (cache), state, x_t, t);
}

at::Tensor
Pi0Model::denoise_step (const PrefixCache &cache, const SuffixLayout &layout,
                        const at::Tensor &state, const at::Tensor &x_t, const at::Tensor &t) const
{
  at::Tensor suffix = embed_suffix (state, x_t, t);
  const int64_t s = suffix.size (1);
  TORCH_CHECK (s == layout.mask.size (1), "suffix length does not match the config's horizon");
  at::Tensor out = run_layers ({at::Tensor (), suffix}, layout.mask, layout.positions, &cache,
                               nullptr, nullptr, true, time_condition (t))[1];
  return velocity_from (out);
}

at::Tensor
Pi0Model::velocity_from (const at::Tensor &suffix_out) const
{
  const int64_t skip = cfg_.pi05 ? 0 : 1; // pi0's state token
  return action_out_proj->forward (
      suffix_out.narrow (1, skip, suffix_out.size (1) - skip).to (at::kFloat));
}

at::Tensor
Pi0Model::velocity_full_sequence (const PrefixEmbedding &prefix, const at::Tensor &state,
                                  const at::Tensor &x_t, const at::Tensor &t) const
{
  at::Tensor suffix = embed_suffix (state, x_t, t);
  const int64_t b = suffix.size (0), s = suffix.size (1), p = prefix.mask.size (1);
  at::Tensor pad = at::cat ({prefix.mask, at::ones ({b, s}, prefix.mask.options ())}, 1);
  at::Tensor ar = at::cat ({at::zeros ({p}, prefix.mask.options ().dtype (at::kBool)),
                            suffix_ar_mask (cfg_.horizon, suffix.device (), !cfg_.pi05)});
  at::Tensor mask = make_attention_mask (pad, ar);
  auto outs = run_layers ({prefix.embeddings, suffix}, mask, positions_from_mask (pad), nullptr,
                          nullptr, nullptr, true, time_condition (t));
  return velocity_from (outs[1]);
}

void
Pi0Model::denoise_loop (const PrefixCache &cache, const at::Tensor &state, at::Tensor &x) const
{
  const int64_t b = x.size (0);
  const double dt = -1.0 / cfg_.num_steps;
  const SuffixLayout layout = suffix_layout (cache); // the same for every step
  for (int step = 0; step < cfg_.num_steps; step++) {
    // t = 1 + step * dt as LeRobot computes it (not by accumulation), so t hits 0.1 exactly.
    const double time = 1.0 + step * dt;
    at::Tensor t = at::full ({b}, static_cast<float> (time), x.options ().dtype (at::kFloat));
    x.add_ (denoise_step (cache, layout, state, x, t), dt);
  }
}

at::Tensor
Pi0Model::sample_actions (const at::Tensor &images, const at::Tensor &image_masks,
                          const at::Tensor &tokens, const at::Tensor &token_mask,
                          const at::Tensor &state, const at::Tensor &noise) const
{
  PrefixCache cache = prefill (embed_prefix (images, image_masks, tokens, token_mask));
  at::Tensor x = noise.to (at::kFloat).clone ();
  denoise_loop (cache, state, x);
  return x;
}

std::vector<at::Tensor>
Pi0Model::gemma_hidden_states (int which, const at::Tensor &x, const at::Tensor &mask,
                               const at::Tensor &positions) const
{
  TORCH_CHECK (which == 0 || which == 1, "expert index must be 0 or 1");
  std::vector<at::Tensor> inputs (2);
  inputs[which] = x;
  std::vector<at::Tensor> hs;
  auto out = run_layers (inputs, mask, positions, nullptr, nullptr, &hs, true);
  hs.push_back (out[which]);
  return hs;
}

} // namespace pi0
