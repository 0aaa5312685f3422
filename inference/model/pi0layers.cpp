/* The layers' own arithmetic (pi0layers.h): Linear, LayerNorm, RMSNorm (plain and adaptive),
 * Embedding and Conv2d as parameter holders, SigLIP's attention + MLP blocks and its vision
 * tower, Gemma's MLP and the Gemma stacks' module trees. Plain ATen calls so that each layer's
 * dtype (fp32 norms and embeddings next to bf16 weights) is visible where it is computed. */
#include "inference/model/pi0layers.h"

#include <memory>
#include <string>

#include <ATen/ATen.h>

namespace pi0
{

namespace layers
{

namespace
{
at::Tensor
as_dtype (const at::Tensor &x, at::ScalarType t)
{
  return x.scalar_type () == t ? x : x.to (t);
}
} // namespace

Linear::Linear (int64_t in, int64_t out, bool has_bias, const at::TensorOptions &opts)
{
  weight = register_parameter ("weight", at::empty ({out, in}, opts), false);
  if (has_bias)
    bias = register_parameter ("bias", at::empty ({out}, opts), false);
}

at::Tensor
Linear::forward (const at::Tensor &x) const
{
  // Mixed layouts (fp32 projections next to bf16 experts) meet here: follow the weight.
  return at::linear (as_dtype (x, weight.scalar_type ()), weight, bias);
}

LayerNorm::LayerNorm (int64_t dim, double eps_, const at::TensorOptions &opts) : eps (eps_)
{
  weight = register_parameter ("weight", at::empty ({dim}, opts), false);
  bias = register_parameter ("bias", at::empty ({dim}, opts), false);
}

at::Tensor
LayerNorm::forward (const at::Tensor &x) const
{
  return at::layer_norm (x.to (at::kFloat), {x.size (-1)}, weight.to (at::kFloat),
                         bias.to (at::kFloat), eps)
      .to (x.scalar_type ());
}

RMSNorm::RMSNorm (int64_t dim, double eps_, const at::TensorOptions &opts, int64_t cond_dim)
    : eps (eps_)
{
  if (cond_dim > 0)
    dense = register_module ("dense", std::make_shared<Linear> (cond_dim, 3 * dim, true, opts));
  else
    weight = register_parameter ("weight", at::empty ({dim}, opts), false);
}

at::Tensor
RMSNorm::forward (const at::Tensor &x) const
{
  TORCH_CHECK (!dense, "an adaptive RMSNorm needs its condition");
  at::Tensor xf = x.to (at::kFloat);
  at::Tensor normed = xf * at::rsqrt (xf.pow (2).mean (-1, true) + eps);
  return (normed * (weight.to (at::kFloat) + 1.0)).to (x.scalar_type ());
}

at::Tensor
RMSNorm::forward (const at::Tensor &x, const at::Tensor &cond, at::Tensor *gate) const
{
  if (!dense)
    return forward (x);
  TORCH_CHECK (cond.defined () && cond.dim () == 2, "adaptive RMSNorm: cond must be [B, dim]");
  at::Tensor xf = x.to (at::kFloat);
  at::Tensor normed = xf * at::rsqrt (xf.pow (2).mean (-1, true) + eps);
  // [B, 3 dim] -> [B, 1, 3 dim] (one modulation per observation, shared by its tokens).
  at::Tensor mod = dense->forward (cond).to (at::kFloat).unsqueeze (1);
  auto parts = mod.chunk (3, -1);
  if (gate)
    *gate = parts[2].to (x.scalar_type ());
  return (normed * (parts[0] + 1.0) + parts[1]).to (x.scalar_type ());
}

Embedding::Embedding (int64_t num, int64_t dim, const at::TensorOptions &opts)
{
  weight = register_parameter ("weight", at::empty ({num, dim}, opts), false);
}

Conv2d::Conv2d (int64_t in, int64_t out, int64_t kernel, const at::TensorOptions &opts)
    : stride (kernel)
{
  weight = register_parameter ("weight", at::empty ({out, in, kernel, kernel}, opts), false);
  bias = register_parameter ("bias", at::empty ({out}, opts), false);
}

SiglipAttention::SiglipAttention (const VisionConfig &c, const at::TensorOptions &opts)
    : heads (c.num_heads)
{
  q_proj = register_module ("q_proj", std::make_shared<Linear> (c.width, c.width, true, opts));
  k_proj = register_module ("k_proj", std::make_shared<Linear> (c.width, c.width, true, opts));
  v_proj = register_module ("v_proj", std::make_shared<Linear> (c.width, c.width, true, opts));
  out_proj = register_module ("out_proj", std::make_shared<Linear> (c.width, c.width, true, opts));
}

SiglipMLP::SiglipMLP (const VisionConfig &c, const at::TensorOptions &opts)
{
  fc1 = register_module ("fc1", std::make_shared<Linear> (c.width, c.mlp_dim, true, opts));
  fc2 = register_module ("fc2", std::make_shared<Linear> (c.mlp_dim, c.width, true, opts));
}

SiglipLayer::SiglipLayer (const VisionConfig &c, const at::TensorOptions &opts)
{
  layer_norm1 = register_module ("layer_norm1",
                                 std::make_shared<LayerNorm> (c.width, c.layer_norm_eps, opts));
  self_attn = register_module ("self_attn", std::make_shared<SiglipAttention> (c, opts));
  layer_norm2 = register_module ("layer_norm2",
                                 std::make_shared<LayerNorm> (c.width, c.layer_norm_eps, opts));
  mlp = register_module ("mlp", std::make_shared<SiglipMLP> (c, opts));
}

at::Tensor
SiglipLayer::forward (const at::Tensor &x) const
{
  const int64_t b = x.size (0), n = x.size (1), w = x.size (2), h = self_attn->heads;
  at::Tensor y = layer_norm1->forward (x);
  auto split = [&] (const at::Tensor &t) {
    return t.view ({b, n, h, w / h}).transpose (1, 2);
  };
  at::Tensor q = split (self_attn->q_proj->forward (y));
  at::Tensor k = split (self_attn->k_proj->forward (y));
  at::Tensor v = split (self_attn->v_proj->forward (y));
  // No mask in the vision tower: every patch sees every patch.
  at::Tensor a = at::scaled_dot_product_attention (q, k, v);
  at::Tensor out = x + self_attn->out_proj->forward (a.transpose (1, 2).reshape ({b, n, w}));
  at::Tensor z = layer_norm2->forward (out);
  return out + mlp->fc2->forward (at::gelu (mlp->fc1->forward (z), "tanh"));
}

SiglipEmbeddings::SiglipEmbeddings (const VisionConfig &c, const at::TensorOptions &opts)
{
  patch_embedding = register_module ("patch_embedding",
                                     std::make_shared<Conv2d> (3, c.width, c.patch_size, opts));
  position_embedding = register_module (
      "position_embedding", std::make_shared<Embedding> (c.num_patches (), c.width, opts));
}

SiglipVisionModel::SiglipVisionModel (const VisionConfig &c, const at::TensorOptions &opts)
{
  embeddings = register_module ("embeddings", std::make_shared<SiglipEmbeddings> (c, opts));
  encoder = register_module ("encoder", std::make_shared<Container> ());
  auto holder = encoder->register_module ("layers", std::make_shared<Container> ());
  for (int i = 0; i < c.depth; i++)
    layers.push_back (
        holder->register_module (std::to_string (i), std::make_shared<SiglipLayer> (c, opts)));
  post_layernorm = register_module ("post_layernorm",
                                    std::make_shared<LayerNorm> (c.width, c.layer_norm_eps, opts));
}

at::Tensor
SiglipVisionModel::forward (const at::Tensor &pixels, std::vector<at::Tensor> *hidden_states) const
{
  // Patch and position embeddings stay in fp32 (openpi keeps them so under bf16).
  const auto &pe = *embeddings->patch_embedding;
  // The stride = kernel convolution as patchify + one matmul: the same sums as the conv (weight
  // [out, in, ky, kx] flattened in that order), no cuDNN algorithm choice (no TF32), and shape
  // rules that stay simple to capture.
  const int64_t n = pixels.size (0), c = pixels.size (1), p = pe.stride;
  const int64_t gh = pixels.size (2) / p, gw = pixels.size (3) / p;
  at::Tensor patches = pixels.to (pe.weight.scalar_type ())
                           .reshape ({n, c, gh, p, gw, p})
                           .permute ({0, 2, 4, 1, 3, 5})
                           .reshape ({n, gh * gw, c * p * p});
  at::Tensor x = at::linear (patches, pe.weight.reshape ({pe.weight.size (0), c * p * p}), pe.bias);
  x = x + embeddings->position_embedding->weight.to (x.scalar_type ());
  x = x.to (layers.empty () ? x.scalar_type ()
                            : layers[0]->self_attn->q_proj->weight.scalar_type ());
  if (hidden_states)
    hidden_states->push_back (x);
  for (const auto &layer : layers) {
    x = layer->forward (x);
    if (hidden_states)
      hidden_states->push_back (x);
  }
  return post_layernorm->forward (x);
}

GemmaAttention::GemmaAttention (const GemmaConfig &c, const at::TensorOptions &opts)
{
  const int64_t q = int64_t (c.num_heads) * c.head_dim, kv = int64_t (c.num_kv_heads) * c.head_dim;
  q_proj = register_module ("q_proj", std::make_shared<Linear> (c.width, q, false, opts));
  k_proj = register_module ("k_proj", std::make_shared<Linear> (c.width, kv, false, opts));
  v_proj = register_module ("v_proj", std::make_shared<Linear> (c.width, kv, false, opts));
  o_proj = register_module ("o_proj", std::make_shared<Linear> (q, c.width, false, opts));
}

GemmaMLP::GemmaMLP (const GemmaConfig &c, const at::TensorOptions &opts)
{
  gate_proj =
      register_module ("gate_proj", std::make_shared<Linear> (c.width, c.mlp_dim, false, opts));
  up_proj = register_module ("up_proj", std::make_shared<Linear> (c.width, c.mlp_dim, false, opts));
  down_proj =
      register_module ("down_proj", std::make_shared<Linear> (c.mlp_dim, c.width, false, opts));
}

at::Tensor
GemmaMLP::forward (const at::Tensor &x) const
{
  return down_proj->forward (at::gelu (gate_proj->forward (x), "tanh") * up_proj->forward (x));
}

GemmaLayer::GemmaLayer (const GemmaConfig &c, double eps, const at::TensorOptions &opts,
                        int64_t cond_dim)
{
  self_attn = register_module ("self_attn", std::make_shared<GemmaAttention> (c, opts));
  mlp = register_module ("mlp", std::make_shared<GemmaMLP> (c, opts));
  input_layernorm =
      register_module ("input_layernorm", std::make_shared<RMSNorm> (c.width, eps, opts, cond_dim));
  post_attention_layernorm = register_module (
      "post_attention_layernorm", std::make_shared<RMSNorm> (c.width, eps, opts, cond_dim));
}

GemmaStack::GemmaStack (const GemmaConfig &c, int64_t vocab, double eps,
                        const at::TensorOptions &opts, int64_t cond_dim)
    : cfg (c)
{
  if (vocab > 0)
    embed_tokens =
        register_module ("embed_tokens", std::make_shared<Embedding> (vocab, c.width, opts));
  layers_holder = register_module ("layers", std::make_shared<Container> ());
  for (int i = 0; i < c.depth; i++)
    layers.push_back (layers_holder->register_module (
        std::to_string (i), std::make_shared<GemmaLayer> (c, eps, opts, cond_dim)));
  norm = register_module ("norm", std::make_shared<RMSNorm> (c.width, eps, opts, cond_dim));
}

} // namespace layers

} // namespace pi0
