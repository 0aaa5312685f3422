/* Pi0 and pi0.5 architecture configuration: the published `pi0` and `pi05` dimensions, tiny
 * versions for tests, and configs read from a checkpoint's config.json (openpi-PyTorch, LeRobot
 * or ours).
 * No LibTorch here: this header is cheap to include. */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pi0
{

/* SigLIP vision tower (ViT with learned position embeddings, no pooling head). */
struct VisionConfig {
  int image_size = 224;
  int patch_size = 14;
  int width = 1152;
  int depth = 27;
  int mlp_dim = 4304;
  int num_heads = 16;
  double layer_norm_eps = 1e-6;
  int num_patches () const { return (image_size / patch_size) * (image_size / patch_size); }
};

/* One Gemma stack. Both experts must agree on heads, kv heads and head_dim because they share
 * one attention over the concatenated sequence. */
struct GemmaConfig {
  int width = 2048;
  int depth = 18;
  int mlp_dim = 16384;
  int num_heads = 8;
  int num_kv_heads = 1;
  int head_dim = 256;
};

/* What the weights say the model is (load_pi0_model reads it off the key names: pi05 has
 * time_mlp_in/out, pi0 state_proj and action_time_mlp_in/out); Unknown where nothing is known. */
enum class ModelKind { Unknown, Pi0, Pi05 };

struct Pi0Config {
  std::string name = "pi0";
  /* pi0.5 (openpi's Pi0Config(pi05=True)): the timestep conditions the action expert through
   * adaRMSNorm (time_mlp_in/out; each expert norm's `dense` gives scale, shift and gate), no
   * state token in the suffix and no action_time_mlp, the state as discrete tokens in the
   * prompt (when discrete_state_input), prompts of 200 tokens. */
  bool pi05 = false;
  /* pi05 only: whether the state goes into the prompt as 256-bin tokens (openpi's
   * discrete_state_input; false for pi05_libero, whose model sees no state). */
  bool discrete_state_input = true;
  VisionConfig vision;
  GemmaConfig text; // PaliGemma's Gemma 2B: the prefix (images + language) expert
  GemmaConfig expert{1024, 18, 4096, 8, 1, 256}; // the action expert ("gemma_300m")
  int vocab_size = 257152;
  int num_views = 3;   // image slots, in openpi order base, left wrist, right wrist
  int max_tokens = 48; // tokenizer_max_length
  int state_dim = 32;  // max_state_dim (state zero-padded to this)
  int action_dim = 32; // max_action_dim
  int horizon = 50;    // chunk_size / action_horizon
  int num_steps = 10;  // Euler steps from t=1 to t=0
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double min_period = 4e-3; // sin-cos time embedding periods
  double max_period = 4.0;
  /* Where the SentencePiece model for this checkpoint lives (a path or a name such as
   * "paligemma_tokenizer.model"); informational, written by `pi0-model init`. */
  std::string tokenizer = "paligemma_tokenizer.model";

  int prefix_len () const { return num_views * vision.num_patches () + max_tokens; }
  int suffix_len () const { return (pi05 ? 0 : 1) + horizon; } // pi0: state token + actions
  const char *type_name () const { return pi05 ? "pi05" : "pi0"; }
  /* Whether the model reads the robot state at all (pi0 always; pi05 through the prompt). */
  bool uses_state () const { return !pi05 || discrete_state_input; }

  /* Throws pi0::Error naming the first inconsistent field. */
  void validate () const;

  /* Parameter count from the dimensions alone (no allocation), split as in the facts file. */
  struct ParamCounts {
    int64_t vision = 0; // SigLIP tower + multi-modal projector
    int64_t text = 0;   // Gemma 2B incl. the token embedding
    int64_t expert = 0; // action expert layers + final norm, no embedding
    int64_t heads = 0;  // state/action/time projections (pi05: action and time MLP)
    int64_t total () const { return vision + text + expert + heads; }
  };
  ParamCounts param_counts () const;

  /* Multi-line human-readable architecture summary (no parameter line). */
  std::string describe () const;

  /* JSON written next to a checkpoint: openpi-style keys plus a "gst_pi0" object holding every
   * dimension, so that non-standard sizes such as pi0-tiny round-trip. */
  std::string to_json () const;
};

/* `pi0`, `pi0-tiny`, `pi05` or `pi05-tiny`; throws pi0::Error listing the known names
 * otherwise. */
Pi0Config config_by_name (const std::string &name);
std::vector<std::string> config_names ();

/* Reads config.json: ours ("gst_pi0" object), openpi-PyTorch (paligemma_variant,
 * action_expert_variant, action_dim, action_horizon) or LeRobot (type "pi0", chunk_size,
 * max_state_dim, max_action_dim, tokenizer_max_length, num_inference_steps, image_resolution,
 * input_features with empty_cameras counted as LeRobot counts them). JSON is read strictly
 * (common/pi0json.h: a key given twice is refused). The model type is LeRobot's "type" ("pi0",
 * "pi05"), openpi's "pi05" flag, or ours; openpi's converter writes neither, and then @weights
 * (what the weights hold) decides. A declared type the weights contradict is an error naming
 * both. Throws pi0::Error naming the file and the field on unreadable files, bad JSON, unknown
 * variants or types.
 *
 * @undeclared_discrete: openpi's discrete_state_input for a pi0.5 config.json that names no
 * model type and does not say (openpi's converter writes neither: it is a field of the training
 * config, false for pi05_libero); unset, pi0.5's default (true). A config.json that says wins. */
Pi0Config config_from_json_file (const std::string &path, ModelKind weights = ModelKind::Unknown,
                                 std::optional<bool> undeclared_discrete = std::nullopt);
Pi0Config config_from_json (const std::string &text, const std::string &source_name,
                            ModelKind weights = ModelKind::Unknown,
                            std::optional<bool> undeclared_discrete = std::nullopt);

} // namespace pi0
