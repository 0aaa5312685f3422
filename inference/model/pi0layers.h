/* The layers of Pi0 and pi0.5 (namespace pi0::layers): the parameter holders of SigLIP's vision
 * tower and of the two Gemma experts, each registered under its checkpoint key name, and the
 * forward passes that belong to one layer alone. Pi0Model (pi0model.h) assembles them; the
 * attention shared by both experts is its own, not a layer's. */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>

#include "inference/model/pi0config.h"

namespace pi0
{

namespace layers
{

/* Parameter holders named like their transformers counterparts. The maths lives in
 * pi0layers.cpp (and the experts' joint pass in pi0model.cpp) as plain ATen calls so that the
 * dtype policy is explicit. */
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

} // namespace pi0
