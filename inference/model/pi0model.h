/* The Pi0 and pi0.5 architectures in LibTorch: SigLIP vision tower + projector, Gemma prefix
 * model, Gemma action expert sharing one attention with it, flow matching with a cached prefix.
 * pi0.5 (Pi0Config::pi05) differs only in the suffix: no state token, and the timestep enters
 * through adaRMSNorm (time_mlp_in/out give a condition; every action-expert norm has a `dense`
 * layer that turns it into scale, shift and a gate on the residual) instead of action_time_mlp.
 *
 * The module tree's parameter names are the openpi-PyTorch / LeRobot checkpoint key names
 * (without LeRobot's leading "model."), e.g.
 *   paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.3.mlp.fc1.weight
 *   paligemma_with_expert.gemma_expert.model.layers.17.self_attn.q_proj.weight
 *   action_time_mlp_in.bias
 * so a checkpoint loads by name (pi0::load_state_dict in inference/io/pi0checkpoint.h).
 *
 * Batch-first tensors throughout: B observations, V views, P prefix tokens, S suffix tokens.
 *
 * The layers are pi0layers.h's; real-time chunking's guidance (RtcGuidance) is pi0rtcguidance.h's.
 * The model is defined in pi0model.cpp, its guided sampling in pi0rtcguidance.cpp. */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>

#include "inference/model/pi0config.h"
#include "inference/model/pi0layers.h"
#include "inference/model/pi0rtcguidance.h"

namespace pi0
{

/* ---- The rules, as free functions so that tests can hold them directly ---- */

/* Block-causal mask (big_vision's make_attn_mask): token i may attend token j iff
 * cumsum(ar)[j] <= cumsum(ar)[i] and both are valid. pad_mask bool [B,N], ar_mask bool/int [B,N]
 * or [N]. Returns bool [B,N,N] (query, key). */
at::Tensor make_attention_mask (const at::Tensor &pad_mask, const at::Tensor &ar_mask);

/* RoPE positions that skip padding: cumsum(pad_mask) - 1, int64 [B,N]. */
at::Tensor positions_from_mask (const at::Tensor &pad_mask);

/* Rotary embedding on x [B,H,N,D] (non-interleaved halves), positions int64 [B,N]. Computed and
 * returned in fp32. */
at::Tensor apply_rope (const at::Tensor &x, const at::Tensor &positions, double theta);

/* Sin-cos time embedding: [sin(t*2pi/p_k), cos(t*2pi/p_k)], p_k = min*(max/min)^(k/(dim/2-1)),
 * computed in fp64, returned fp32 [B,dim]. */
at::Tensor time_embedding (const at::Tensor &t, int64_t dim, double min_period, double max_period);

/* The suffix's ar mask. pi0 (state_token): [1 (state), 1 (first action), 0 ...], the state its
 * own block and the actions one block after it, bool [1 + horizon]; pi0.5: [1, 0 ...], the
 * actions one block, bool [horizon]. On `device`. */
at::Tensor suffix_ar_mask (int64_t horizon, const at::Device &device, bool state_token = true);

/* Masked logits get this (openpi's big_neg) rather than -inf so a fully masked padding row stays
 * finite instead of turning into NaN that would leak through 0 * NaN. */
constexpr float kMaskedLogit = -2.3819763e38f;

enum class AttentionImpl {
  Eager, // explicit fp32 logits and softmax: the reference
  Sdpa,  // at::scaled_dot_product_attention with a finite additive mask (fast path on CUDA)
};

/* K/V of every prefix layer, computed once per observation and read by every denoising step. */
struct PrefixCache {
  std::vector<at::Tensor> keys, values; // per layer [B, kv_heads, P, head_dim], after RoPE
  at::Tensor mask;                      // bool [B, P]
};

struct PrefixEmbedding {
  at::Tensor embeddings; // [B, P, text.width] in the compute dtype
  at::Tensor mask;       // bool [B, P]
};

class Pi0Model : public torch::nn::Module
{
public:
  /* Allocates (uninitialised) parameters with `opts`; use at::kMeta to count without memory. */
  explicit Pi0Model (const Pi0Config &config, const at::TensorOptions &opts = at::TensorOptions ());

  const Pi0Config &config () const { return cfg_; }

  /* Seeded random weights (deterministic for a seed): linear/conv U(-1/sqrt(in), 1/sqrt(in)),
   * embeddings N(0, 1/width), norm scales zero (i.e. gain 1), biases small. */
  void init_random (uint64_t seed);

  /* Moves to `device` and casts the Gemma/SigLIP weights to `dtype`, keeping norms, the patch and
   * position embeddings and the state/action/time projections in fp32 (openpi / LeRobot's
   * mixed-precision layout). fp16 is refused with an error. */
  void set_precision (const at::Device &device, at::ScalarType dtype);
  at::ScalarType compute_dtype () const { return dtype_; }
  at::Device device () const { return device_; }

  void set_attention_impl (AttentionImpl impl) { attn_impl_ = impl; }
  AttentionImpl attention_impl () const { return attn_impl_; }

  int64_t num_parameters () const;

  /* ---- stages ---- */
  /* images [B,V,3,H,W] float in [-1,1] -> [B, V*patches, text.width] */
  at::Tensor embed_images (const at::Tensor &images) const;
  /* tokens int64 [B,L] -> [B,L,text.width], scaled by sqrt(text.width) (text only, not images) */
  at::Tensor embed_tokens (const at::Tensor &tokens) const;
  PrefixEmbedding embed_prefix (const at::Tensor &images, const at::Tensor &image_masks,
                                const at::Tensor &tokens, const at::Tensor &token_mask) const;
  /* One pass of the prefix expert over the prefix; keeps every layer's K/V. */
  PrefixCache prefill (const PrefixEmbedding &prefix) const;
  /* pi0: [state token, action+time tokens], [B, 1 + horizon, expert.width]; pi0.5: the action
   * tokens alone, [B, horizon, expert.width] (state unused). In the compute dtype. */
  at::Tensor embed_suffix (const at::Tensor &state, const at::Tensor &x_t,
                           const at::Tensor &t) const;
  /* pi0.5's adaRMSNorm condition: silu(time_mlp_out(silu(time_mlp_in(time_embedding(t))))),
   * fp32 [B, expert.width]. Undefined for pi0. */
  at::Tensor time_condition (const at::Tensor &t) const;
  /* The suffix's attention mask [B, S, P + S] and positions [B, S]: the same for every step. */
  struct SuffixLayout {
    at::Tensor mask, positions;
  };
  SuffixLayout suffix_layout (const PrefixCache &cache) const;
  /* Velocity v_t [B,H,A] fp32 from the suffix expert attending the cached prefix. */
  at::Tensor denoise_step (const PrefixCache &cache, const at::Tensor &state, const at::Tensor &x_t,
                           const at::Tensor &t) const;
  at::Tensor denoise_step (const PrefixCache &cache, const SuffixLayout &layout,
                           const at::Tensor &state, const at::Tensor &x_t,
                           const at::Tensor &t) const;
  /* Same velocity without a cache: both experts over the concatenated sequence in one pass
   * (the training-time forward). The cached path must equal this. */
  at::Tensor velocity_full_sequence (const PrefixEmbedding &prefix, const at::Tensor &state,
                                     const at::Tensor &x_t, const at::Tensor &t) const;
  /* x <- x + dt * v(x, t) from t = 1 down to dt (num_steps steps), in place on `x` (fp32). */
  void denoise_loop (const PrefixCache &cache, const at::Tensor &state, at::Tensor &x) const;
  /* denoise_loop with RTC guidance toward rtc.prefix (see RtcGuidance); without a prefix it is
   * denoise_loop. Runs eagerly (no CUDA graph); in Vjp mode it turns autograd on for the suffix
   * pass whatever the caller's mode (InferenceMode and NoGradGuard included; a cache made under
   * InferenceMode is fine). Throws pi0::Error on bad RtcGuidance fields before any step runs. A
   * NaN or infinity that arises inside the guidance is not hidden: it reaches `x`. Defined in
   * pi0rtcguidance.cpp. */
  void denoise_loop_guided (const PrefixCache &cache, const at::Tensor &state, at::Tensor &x,
                            const RtcGuidance &rtc) const;

  /* Everything: actions [B,H,A] fp32 (normalised space, padded dims included). */
  at::Tensor sample_actions (const at::Tensor &images, const at::Tensor &image_masks,
                             const at::Tensor &tokens, const at::Tensor &token_mask,
                             const at::Tensor &state, const at::Tensor &noise) const;
  /* sample_actions with RTC guidance (denoise_loop_guided); without a prefix, sample_actions. */
  at::Tensor sample_actions_guided (const at::Tensor &images, const at::Tensor &image_masks,
                                    const at::Tensor &tokens, const at::Tensor &token_mask,
                                    const at::Tensor &state, const at::Tensor &noise,
                                    const RtcGuidance &rtc) const;

  /* For parity with transformers' GemmaModel: runs expert `which` (0 prefix, 1 action expert) alone
   * over x [B,N,width] with an explicit bool mask [B,N,N] and positions [B,N]. Returns the input
   * plus each layer's output, and the final-normed output last (N+2 tensors). */
  std::vector<at::Tensor> gemma_hidden_states (int which, const at::Tensor &x,
                                               const at::Tensor &mask,
                                               const at::Tensor &positions) const;

  /* The SigLIP tower alone (for parity with transformers' SiglipVisionModel). */
  const layers::SiglipVisionModel &vision_tower () const { return *vision_; }

private:
  /* One pass of the experts' layers. inputs[e] is expert e's tokens (or undefined), mask is
   * bool [B, Nq, Nkv] over (cache + new tokens), positions int64 [B, Nq]. */
  std::vector<at::Tensor> run_layers (const std::vector<at::Tensor> &inputs, const at::Tensor &mask,
                                      const at::Tensor &positions, const PrefixCache *cache_in,
                                      PrefixCache *cache_out,
                                      std::vector<at::Tensor> *hidden_states, bool final_norm,
                                      const at::Tensor &cond = at::Tensor ()) const;
  /* The velocity from the action expert's output over the suffix (pi0 drops the state row). */
  at::Tensor velocity_from (const at::Tensor &suffix_out) const;
  at::Tensor attention (const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                        const at::Tensor &mask) const;

  Pi0Config cfg_;
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_ = at::kCPU;
  AttentionImpl attn_impl_ = AttentionImpl::Eager;

  std::shared_ptr<layers::Container> pwe_, paligemma_, paligemma_model_, vision_tower_, projector_,
      expert_;
  std::shared_ptr<layers::SiglipVisionModel> vision_;
  std::shared_ptr<layers::Linear> projector_linear_;
  std::shared_ptr<layers::GemmaStack> text_, action_expert_;
  std::vector<std::shared_ptr<layers::GemmaStack>> experts_; // {text_, action_expert_}

public:
  std::shared_ptr<layers::Linear> action_in_proj, action_out_proj;
  std::shared_ptr<layers::Linear> state_proj, action_time_mlp_in, action_time_mlp_out; // pi0
  std::shared_ptr<layers::Linear> time_mlp_in, time_mlp_out;                           // pi0.5
};

} // namespace pi0
