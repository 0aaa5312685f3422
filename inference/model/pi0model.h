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
 * Batch-first tensors throughout: B observations, V views, P prefix tokens, S suffix tokens. */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "inference/model/pi0config.h"
#include "inference/model/pi0rtcmodes.h"

namespace pi0
{

namespace layers
{

/* Parameter holders named like their transformers counterparts. The maths lives in
 * pi0model.cpp as plain ATen calls so that the dtype policy is explicit. */
struct Linear : torch::nn::Module {
  Linear (int64_t in, int64_t out, bool bias, const at::TensorOptions &opts);
  at::Tensor forward (const at::Tensor &x) const;
  at::Tensor weight, bias;
};

struct LayerNorm : torch::nn::Module {
  LayerNorm (int64_t dim, double eps, const at::TensorOptions &opts);
  at::Tensor forward (const at::Tensor &x) const; // computed in fp32, returned in x's dtype
  at::Tensor weight, bias;
  double eps;
};

/* Gemma RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight), in fp32.
 * Adaptive (cond_dim > 0, pi0.5's action expert; no weight then): a Linear `dense`
 * cond_dim -> 3 dim gives [scale, shift, gate] from the condition c [B, cond_dim], and
 * y = x * rsqrt(mean(x^2) + eps) * (1 + scale) + shift; the gate scales the residual branch. */
struct RMSNorm : torch::nn::Module {
  RMSNorm (int64_t dim, double eps, const at::TensorOptions &opts, int64_t cond_dim = 0);
  at::Tensor forward (const at::Tensor &x) const;
  /* Adaptive forward: x [B,N,dim], cond [B,cond_dim]; *gate gets [B,1,dim] in x's dtype. A
   * plain norm ignores cond and leaves *gate undefined. */
  at::Tensor forward (const at::Tensor &x, const at::Tensor &cond, at::Tensor *gate) const;
  bool adaptive () const { return dense != nullptr; }
  at::Tensor weight;
  std::shared_ptr<Linear> dense;
  double eps;
};

struct Embedding : torch::nn::Module {
  Embedding (int64_t num, int64_t dim, const at::TensorOptions &opts);
  at::Tensor weight;
};

struct Conv2d : torch::nn::Module { // the patch embedding: kernel = stride = patch
  Conv2d (int64_t in, int64_t out, int64_t kernel, const at::TensorOptions &opts);
  at::Tensor weight, bias;
  int64_t stride;
};

/* Holds children only (e.g. "paligemma", "model"): the checkpoint's key path. */
struct Container : torch::nn::Module {
};

struct SiglipAttention : torch::nn::Module {
  SiglipAttention (const VisionConfig &c, const at::TensorOptions &opts);
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  int64_t heads;
};

struct SiglipMLP : torch::nn::Module {
  SiglipMLP (const VisionConfig &c, const at::TensorOptions &opts);
  std::shared_ptr<Linear> fc1, fc2;
};

struct SiglipLayer : torch::nn::Module {
  SiglipLayer (const VisionConfig &c, const at::TensorOptions &opts);
  at::Tensor forward (const at::Tensor &x) const;
  std::shared_ptr<LayerNorm> layer_norm1, layer_norm2;
  std::shared_ptr<SiglipAttention> self_attn;
  std::shared_ptr<SiglipMLP> mlp;
};

struct SiglipEmbeddings : torch::nn::Module {
  SiglipEmbeddings (const VisionConfig &c, const at::TensorOptions &opts);
  std::shared_ptr<Conv2d> patch_embedding;
  std::shared_ptr<Embedding> position_embedding;
};

struct SiglipVisionModel : torch::nn::Module {
  SiglipVisionModel (const VisionConfig &c, const at::TensorOptions &opts);
  /* pixels [N,3,H,W] -> [N, patches, width]; hidden_states (optional) receives the embeddings
   * and each layer's output, as transformers' output_hidden_states does. */
  at::Tensor forward (const at::Tensor &pixels,
                      std::vector<at::Tensor> *hidden_states = nullptr) const;
  std::shared_ptr<SiglipEmbeddings> embeddings;
  std::shared_ptr<Container> encoder;
  std::vector<std::shared_ptr<SiglipLayer>> layers; // registered as encoder.layers.{i}
  std::shared_ptr<LayerNorm> post_layernorm;
};

struct GemmaAttention : torch::nn::Module {
  GemmaAttention (const GemmaConfig &c, const at::TensorOptions &opts);
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
};

struct GemmaMLP : torch::nn::Module {
  GemmaMLP (const GemmaConfig &c, const at::TensorOptions &opts);
  at::Tensor forward (const at::Tensor &x) const; // down(gelu_tanh(gate(x)) * up(x))
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
};

struct GemmaLayer : torch::nn::Module {
  /* cond_dim > 0: adaptive norms (pi0.5's action expert). */
  GemmaLayer (const GemmaConfig &c, double eps, const at::TensorOptions &opts,
              int64_t cond_dim = 0);
  std::shared_ptr<GemmaAttention> self_attn;
  std::shared_ptr<GemmaMLP> mlp;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
};

/* A Gemma "model": optional embed_tokens, layers.{i}, norm. */
struct GemmaStack : torch::nn::Module {
  GemmaStack (const GemmaConfig &c, int64_t vocab, double eps, const at::TensorOptions &opts,
              int64_t cond_dim = 0);
  GemmaConfig cfg;
  std::shared_ptr<Embedding> embed_tokens; // null for the action expert
  std::shared_ptr<Container> layers_holder;
  std::vector<std::shared_ptr<GemmaLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
};

} // namespace layers

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

/* ---- Real-time chunking (RTC; Black, Galliker, Levine 2025, docs/rtc.md) ----
 *
 * While the robot executes the current chunk, the next one is sampled so that its first rows
 * agree with what will still be executed: at each Euler step the velocity is corrected toward
 * the executing chunk's remaining actions (the "prefix"), weighted by a soft mask over rows.
 *
 * Time conventions. The paper integrates tau from 0 (noise) to 1 (data) with
 * A <- A + v_paper / n; pi0 (openpi, LeRobot, denoise_loop) integrates t from 1 (noise) to 0
 * (data) with x <- x + dt * v, dt = -1/n, and v = noise - data = -v_paper. So tau = 1 - t, the
 * data estimate is x1 = x - t * v (the paper's A + (1 - tau) v_paper), the correction
 * J^T diag(W) (Y - x1) (J = dx1/dx, the same in both conventions) is *subtracted* from pi0's v
 * where the paper adds it, and the guidance weight is the paper's
 *   min(beta, (1 - tau)/tau * ((1 - tau)^2 + tau^2) / (1 - tau)^2)   evaluated at tau = 1 - t
 * (beta at t = 1, where the formula is infinite). */

/* RtcSchedule (the mask W) and RtcJacobian: model/pi0rtcmodes.h. */

struct RtcGuidance {
  /* The executing chunk's actions that will still run when this inference starts, row 0 aligned
   * with the new chunk's row 0: float [B,R,A] or [R,A] (broadcast over the batch), R <= horizon,
   * A <= action_dim, in the model's normalised space. Missing rows and dims are zero-padded (as
   * LeRobot pads); rows from the mask's end on are ignored. Must be finite (else pi0::Error).
   * Undefined: no guidance, the plain sampler. */
  at::Tensor prefix;
  int64_t delay = 0;             // d: rows that execute before the new chunk takes over (weight 1)
  int64_t execution_horizon = 0; // s: the mask ends at row min(horizon - s, R); rows after are free
  double max_guidance_weight = 5.0; // beta: the clip of the guidance weight (>= 0; 0 = no guidance)
  RtcSchedule schedule = RtcSchedule::Exp;
  RtcJacobian jacobian = RtcJacobian::Vjp;
};

/* The mask W, float [horizon] on the CPU: rows [0, min(delay, end)) weigh 1, rows [end, horizon)
 * weigh 0, the middle follows `schedule`. Throws pi0::Error on delay < 0 or end outside
 * [0, horizon]. Equals LeRobot's RTCProcessor.get_prefix_weights(delay, end, horizon). */
at::Tensor rtc_prefix_weights (int64_t delay, int64_t end, int64_t horizon, RtcSchedule schedule);

/* The guidance weight at pi0 time t (noise at 1) for clip beta, in float32 arithmetic as LeRobot
 * computes it: beta at t = 1, 0 at t = 0. */
float rtc_guidance_weight (double t, double max_guidance_weight);

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
   * NaN or infinity that arises inside the guidance is not hidden: it reaches `x`. */
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
