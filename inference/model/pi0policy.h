/* The Policy interface: one observation in, one action chunk out. Two backends implement it:
 * the native LibTorch Pi0 (load_pi0_policy / make_pi0_policy) and any TorchScript module with the
 * signature documented below (load_torchscript_policy). No GStreamer here.
 *
 * Inputs are already preprocessed (resized and normalised views, tokenized prompt, normalised
 * state); outputs are in the model's normalised action space (un-normalise with
 * pi0::NormStats). See docs/model.md. */
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "inference/model/pi0config.h"
#include "inference/model/pi0rtcmodes.h"

namespace pi0
{

class Pi0Model;

/* Real-time chunking guidance (docs/rtc.md): the executing chunk's actions that will still run,
 * row 0 aligned with the new chunk's row 0, in the model's normalised space: float [R, A] with
 * R <= horizon and A <= action_dim (zero-padded). Undefined prefix: plain sampling. */
struct PolicyGuidance {
  at::Tensor prefix;
  int64_t delay = 0;                // rows that run before the new chunk takes over (weight 1)
  int64_t execution_horizon = 0;    // the paper's s: the mask ends at row horizon - s (<= R)
  double max_guidance_weight = 5.0; // beta
  bool identity_jacobian = false;   // J = I (LeRobot) instead of the VJP (the paper)
  RtcSchedule schedule = RtcSchedule::Exp; // the mask W (the paper's exponential by default)
};

struct PolicyInput {
  at::Tensor images;      // float [V,3,H,W], values in [-1,1], views in openpi order
  at::Tensor image_masks; // bool [V], true = real view; undefined = all real
  at::Tensor tokens;      // int64 (or int32) [L] token ids, right-padded
  at::Tensor token_mask;  // bool [L], true = real token
  at::Tensor state;       // float [<= state_dim]; zero-padded to state_dim
  at::Tensor noise;       // float [horizon, action_dim]; undefined = drawn from `seed`
  uint64_t seed = 0; // noise seed when `noise` is undefined (CPU generator: same on any device)
  PolicyGuidance guidance; // RTC; only backends with supports_guidance() accept a prefix
};

/* What a backend expects; 0 = not declared (TorchScript modules may leave some out). */
struct PolicySpec {
  int num_views = 0;
  int image_size = 0;
  int max_tokens = 0;
  int state_dim = 0;
  int action_dim = 0;
  int horizon = 0;
  /* pi0.5 with discrete_state_input: the state reaches the model only as 256-bin tokens in the
   * prompt (OpenedPolicy builds it; PolicyInput::state is then unused). */
  bool state_in_prompt = false;
  /* false: the model reads no state at all (openpi's pi05_libero). */
  bool reads_state = true;
  std::string model_type = "pi0"; // "pi0", "pi05"; "torchscript" for a TorchScript module
};

/* Wall-clock milliseconds per stage of the last inference (measured only when asked: the
 * device is synchronised between stages for it). */
struct StageTimings {
  double vision_ms = 0, prefix_ms = 0, denoise_ms = 0, total_ms = 0;
};

/* A Policy is used from one thread at a time (an element's streaming thread): infer() reuses
 * buffers (and, on CUDA, captured graphs) between calls. */
class Policy
{
public:
  virtual ~Policy () = default;
  /* Actions float32 CPU [horizon, action_dim]. Throws pi0::Error on inputs that do not match
   * spec() (naming the input and the expected shape), before running anything. */
  virtual at::Tensor infer (const PolicyInput &input, StageTimings *timings = nullptr) = 0;
  /* One chunk per input, in order, each with its own noise (seed), prompt and state. The base
   * (TorchScript) runs them one after the other; the native Pi0 stacks them into one forward
   * pass (what serving several robots from one GPU needs): unguided inputs together, guided
   * ones together when their guidance settings match (see policy.cpp). Every input is checked
   * before anything runs. */
  virtual std::vector<at::Tensor> infer_batch (const std::vector<PolicyInput> &inputs);
  /* Runs one inference on a blank observation so that the first real one does not pay for
   * one-time work (CUDA graph capture, cuBLAS/cuDNN set-up, first-touch allocation). Call it
   * before streaming starts. No-op when spec() does not declare every input dimension. */
  virtual void warmup ();
  /* Whether infer() can guide sampling toward PolicyInput::guidance (real-time chunking). A
   * backend without it throws pi0::Error on a guided input. */
  virtual bool supports_guidance () const { return false; }
  virtual const PolicySpec &spec () const = 0;
  virtual c10::Device device () const = 0;
  virtual at::ScalarType dtype () const = 0;
  /* One line: backend, model, device, dtype. */
  virtual std::string describe () const = 0;
};

struct PolicyOptions {
  c10::Device device = c10::Device (c10::kCPU);
  at::ScalarType dtype = at::kFloat; // kFloat or kBFloat16; kHalf is refused
  bool cuda_graph = true;            // CUDA only: capture the denoising loop once, replay it
};

/* "fp32"/"float32", "bf16"/"bfloat16"; "fp16"/"float16" throws pi0::Error explaining why. */
at::ScalarType parse_dtype (const std::string &name);
/* "cpu", "cuda", "cuda:N"; throws pi0::Error when CUDA is asked for but unavailable. */
c10::Device parse_device (const std::string &name);
bool cuda_available ();

/* Standard-normal float32 [horizon, action_dim] noise from a CPU generator seeded with `seed`. */
at::Tensor noise_from_seed (uint64_t seed, int64_t horizon, int64_t action_dim);

/* The native Pi0 backend over a constructed (and loaded or initialised) model. The model is
 * moved to options.device / options.dtype. */
std::unique_ptr<Policy> make_pi0_policy (std::shared_ptr<Pi0Model> model,
                                         const PolicyOptions &options);

/* Loads a checkpoint directory (config.json + model.safetensors) or a model.safetensors file
 * (config.json next to it), openpi-PyTorch or LeRobot layout; @num_steps > 0 replaces the
 * config's Euler steps; @undeclared_discrete as config_from_json's. The weights file is
 * validated before the model is allocated. Throws pi0::Error. */
std::shared_ptr<Pi0Model> load_pi0_model (const std::string &path, int num_steps = 0,
                                          std::optional<bool> undeclared_discrete = std::nullopt);
/* What a checkpoint's tensors are by their names: pi0.5 holds time_mlp_in, pi0 state_proj and
 * action_time_mlp_in (with or without LeRobot's "model."); Unknown when neither or both. */
ModelKind model_kind_of (const std::map<std::string, at::Tensor> &tensors);
std::unique_ptr<Policy> load_pi0_policy (const std::string &path, const PolicyOptions &options);
/* Writes DIR/model.safetensors (fp32, openpi key names) and DIR/config.json. */
void save_pi0_model (const Pi0Model &model, const std::string &dir);

/* TorchScript backend. The module's forward must be
 *   forward(images: Tensor[1,V,3,H,W] float32, image_masks: Tensor[1,V] bool,
 *           tokens: Tensor[1,L] int64, token_mask: Tensor[1,L] bool,
 *           state: Tensor[1,S] float32, noise: Tensor[1,H,A] float32) -> Tensor[1,H,A]
 * and the module must carry int attributes `horizon` and `action_dim` (the noise shape); optional
 * int attributes `num_views`, `image_size`, `max_tokens`, `state_dim` make infer() check inputs.
 * Throws pi0::Error when the file cannot be loaded or lacks the attributes. */
std::unique_ptr<Policy> load_torchscript_policy (const std::string &path,
                                                 const PolicyOptions &options);

/* A directory or *.safetensors -> native Pi0; *.pt / *.ts / *.torchscript -> TorchScript.
 * open_policy() (model/pi0openpolicy.h) adds the builtins, the tokenizer and the norm stats. */
std::unique_ptr<Policy> load_policy (const std::string &path, const PolicyOptions &options);

} // namespace pi0
