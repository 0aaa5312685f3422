/* open_policy(): from a model URI and a few options to everything a caller needs to turn
 * observations into actions, behind one small interface (OpenedPolicy). This is what an element
 * calls, and nothing below it: which backend, which checkpoint layout, which tokenizer, the
 * norm stats, the device, the dtype and the CUDA stream are decided here, as DeepStream's
 * gst-nvinfer keeps its model behind DsNvInferImpl and NNStreamer a framework behind a vtable
 * (open, invoke, close). No GStreamer here.
 *
 * URIs:
 *   builtin:pi0-tiny        a seeded demo model with random weights (untrained)
 *   builtin:pi0             the full-size architecture, seeded random weights (untrained)
 *   DIR                     a checkpoint directory: config.json + model.safetensors
 *                           (openpi-PyTorch, LeRobot or gst-pi0 layout)
 *   FILE.safetensors        the weights, with config.json beside them
 *   FILE.pt|.ts|.torchscript a TorchScript policy (signature in model/pi0policy.h)
 *
 * Requests come in batches, each with its own prompt, seed and state (one client or robot per
 * request): the native Pi0 runs a batch as one stacked forward pass (Policy::infer_batch; each
 * request gets its alone-result up to float reordering), a TorchScript policy one request after
 * the other; see docs/model.md. */
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "inference/io/pi0error.h"
#include "inference/io/pi0normstats.h"
#include "inference/io/pi0tokenizer.h"
#include "inference/model/pi0policy.h"
#include "inference/model/pi0transforms.h"

namespace pi0
{

class OwnStream;

enum class DeviceChoice { Auto, Cpu, Cuda }; // Auto: CUDA when usable, else the CPU
// Auto: bf16 on CUDA, fp32 on the CPU; in the order of pi0infer's `precision` property.
enum class PrecisionChoice { Auto, Bf16, Fp32 };

struct OpenOptions {
  DeviceChoice device = DeviceChoice::Auto;
  /* The CUDA device (0, 1, ...) when the policy runs on CUDA; one LibTorch does not see is an
   * OpenError. */
  int cuda_device_id = 0;
  PrecisionChoice precision = PrecisionChoice::Auto;
  bool cuda_graph = true;
  /* Euler steps of native models; 0 keeps the checkpoint's (num_inference_steps). */
  int num_steps = 0;
  /* The SentencePiece model; empty: the one the checkpoint's config.json names (relative to the
   * checkpoint), or tiny_paligemma.model from data_dirs for builtin models. */
  std::string tokenizer;
  /* Where the builtin models' bundled tokenizer is looked for, in order. */
  std::vector<std::string> data_dirs;
  /* openpi norm_stats.json (or its directory), or a directory with LeRobot's processor files
   * (policy_preprocessor.json ...); empty: a checkpoint directory's own LeRobot processor files
   * when it has them, else none (actions stay normalized). */
  std::string norm_stats;
  /* For openpi's norm_stats.json. LeRobot's processor files name their own modes (and bring
   * LeRobot's formulas): those are used whatever this says. */
  NormMode norm_mode = NormMode::ZScore;
  /* The robot's native action dims kept from the model's padded ones; 0 = all (with
   * transforms: theirs, which any other value must equal). */
  int action_dims = 0;
  /* openpi's robot transforms of the checkpoint's training config (model/pi0transforms.h):
   * "aloha", "aloha_sim", "libero", "droid"; empty or "none": none. Applied around the norm
   * stats in openpi's order (the state before Normalize, the actions after Unnormalize). */
  std::string transforms;
  /* openpi's discrete_state_input (does the pi0.5 model read the state as prompt bins?) for a
   * checkpoint whose config.json names no model type and does not say: openpi's converter
   * writes neither, the training config fixes it (pi05_libero: false; pi05_droid, pi05_base:
   * true). Unset: true. Checkpoints that declare their type (LeRobot's, ours) say it
   * themselves, and this does not apply to them. */
  std::optional<bool> discrete_state_input;
  /* Prompt length in tokens when the model does not declare one (TorchScript). */
  int prompt_length = 48;
};

/* Why open_policy() failed, for callers that map failures onto their own error domains (an
 * element onto GStreamer's RESOURCE/LIBRARY errors). what() is the message to show. */
class OpenError : public Error
{
public:
  enum class Kind {
    NotFound,   // the URI names nothing (no such file, no such builtin)
    Settings,   // the options or URI cannot work (unknown kind of file, no tokenizer, dims)
    Unreadable, // a file is there but cannot be used (corrupt, mismatched, malformed)
    Library,    // LibTorch or the device refused (no CUDA device, a LibTorch error)
  };
  OpenError (Kind kind, const std::string &what) : Error (what), kind_ (kind) {}
  Kind kind () const { return kind_; }

private:
  Kind kind_;
};

/* One observation to turn into one chunk, with its own options. */
struct Request {
  /* Float [V,3,H,W] in [-1,1] (cudaprep's output), on the CPU or a CUDA device, V at most
   * spec().num_views: missing slots are added as masked views. Read only after ready_event. */
  at::Tensor images;
  at::Tensor image_masks;      // bool [V]; undefined = all real
  void *ready_event = nullptr; // a cudaEvent_t the policy's stream waits on (no CPU wait)
  /* Float [S] in robot units: through the transforms, normalized with the norm stats,
   * zero-padded to the model's state size. Undefined: a zero state (used as is; with
   * transforms, transforms().state_dims() zeros in robot units), except for a model that reads
   * the state through its prompt (pi0.5, spec().state_in_prompt): pi0::Error. */
  at::Tensor state;
  std::string prompt; // the instruction in words; tokenized once per distinct prompt
  uint64_t seed = 0;  // the flow-matching noise is drawn from this seed...
  at::Tensor noise;   // ...unless given: float [horizon, model action_dim] (tests, parity)
  /* Real-time chunking (docs/rtc.md): guidance.prefix in robot units, float [R, d] with
   * R <= horizon and d <= action_dims() (with transforms d = action_dims()), finite; through
   * the transforms' inverse, normalised with the norm stats and zero-padded here. Undefined: plain sampling. Needs supports_guidance() (else pi0::Error). */
  PolicyGuidance guidance;
};

struct Response {
  at::Tensor actions;            // float32 CPU [horizon, action_dims()], robot units
  bool prompt_truncated = false; // the prompt needed more tokens than the model takes
  /* The model's pass alone (vision, prefix, denoising; for a batch, the whole batch's pass),
   * without the request's preparation (tokenizer, norm stats, transforms) or the actions'
   * unnormalization: what infer() spent outside the model is the rest. */
  double model_ms = 0;
};

class OpenedPolicy
{
public:
  ~OpenedPolicy ();
  OpenedPolicy (const OpenedPolicy &) = delete;
  OpenedPolicy &operator= (const OpenedPolicy &) = delete;

  /* One response per request, in order. Throws pi0::Error (or c10::Error from inside
   * LibTorch) naming what is wrong; nothing is returned for any request of a failed batch. Used
   * from one thread at a time. */
  std::vector<Response> infer (const std::vector<Request> &batch);
  Response infer (const Request &request);

  /* Runs one blank observation through the whole path (tokenizer, norm stats, backend, CUDA
   * graph capture) so that a broken policy fails now and the first real observation is not
   * slow. Returns false, running nothing, when the inputs' sizes are not known before the first
   * observation: a TorchScript module that declares no num_views, image_size or state_dim (the
   * images' size and the state's length then come from the stream). */
  bool warmup ();

  const PolicySpec &spec () const;
  bool supports_guidance () const;
  int action_dims () const { return action_dims_; }
  int prompt_length () const;
  const std::string &model_id () const { return model_id_; }
  bool untrained () const { return untrained_; }
  const Tokenizer &tokenizer () const { return tokenizer_; }
  bool has_norm_stats () const { return norm_ != nullptr; }
  const Transforms &transforms () const { return transforms_; }
  c10::Device device () const;
  /* One line: backend, model, device, dtype, tokenizer, norm stats, transforms. */
  std::string describe () const;

private:
  friend std::unique_ptr<OpenedPolicy> open_policy (const std::string &, const OpenOptions &);
  OpenedPolicy ();
  /* @model_state: with transforms, the state they made (float64), which the actions' way back
   * adds to the deltas. */
  PolicyInput prepare (const Request &r, bool *truncated, at::Tensor *model_state);

  std::unique_ptr<Policy> policy_;
  Tokenizer tokenizer_;
  std::unique_ptr<NormStats> norm_;
  NormMode norm_mode_ = NormMode::ZScore;        // the state's
  NormMode action_norm_mode_ = NormMode::ZScore; // the actions' (LeRobot may differ)
  bool lerobot_newline_ = false; // LeRobot's pi0 prompt: the task + "\n" tokenized as one text
  Transforms transforms_;
  std::string model_id_;
  bool untrained_ = false;
  int action_dims_ = 0;
  int prompt_length_ = 48;
  std::unique_ptr<OwnStream> stream_;
  std::map<std::string, Tokens> token_cache_; // per prompt; bounded (cleared when full)
};

/* Opens @uri as described at the top of this file. Throws OpenError. */
std::unique_ptr<OpenedPolicy> open_policy (const std::string &uri, const OpenOptions &options);

} // namespace pi0
