// openpi normalization statistics (assets/<asset_id>/norm_stats.json) and the Normalize /
// Unnormalize transforms of openpi's transforms.py, for the robot state and the actions.
#pragma once

#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace pi0
{

// ZScore: (x - mean) / (std + 1e-6), used by pi0. Quantile: maps [q01, q99] to [-1, 1] as
// (x - q01) / (q99 - q01 + 1e-6) * 2 - 1, used by pi05 and pi0-FAST. Those are openpi's
// formulas; LeRobot's processor files (NormRule::LeRobot, below) bring their own, and MinMax
// ([min, max] to [-1, 1]), Quantile10 ([q10, q90]) and Identity as well.
enum class NormMode { ZScore, Quantile, MinMax, Quantile10, Identity };

// Whose arithmetic: openpi's (float64 as numpy, eps 1e-6 in both directions) or LeRobot's
// NormalizerProcessorStep (float32 as torch, its eps, 1e-8 by default, only in the z-score
// divisor and in place of a zero range; the inverses without it).
enum class NormRule { Openpi, LeRobot };

struct LeRobotProcessors;

// Parses "zscore" / "z-score" / "mean_std" and "quantile" / "quantiles"; throws pi0::Error otherwise.
NormMode norm_mode_from_string (const std::string &name);
const char *norm_mode_name (NormMode mode);

// The statistics of one key ("state" or "actions"): float64 CPU vectors of the native dim.
struct NormVectors {
  at::Tensor mean, std;
  std::optional<at::Tensor> q01, q99; // absent in some files; required by Quantile
  std::optional<at::Tensor> min, max, q10, q90; // LeRobot's, for MinMax and Quantile10
  int64_t dim () const { return mean.size (0); }
};

class NormStats
{
public:
  // Reads openpi's {"norm_stats": {"state": {"mean", "std", "q01", "q99"}, "actions": {...}}}.
  // `path` is the JSON file or a directory holding norm_stats.json (or, when it holds LeRobot's
  // policy_preprocessor.json instead, those processor files: load_lerobot_processors). Throws pi0::Error naming
  // the file and the problem: not JSON, missing key, non-numeric, non-finite or empty vector,
  // a value beyond float32's range (1e39: it would become infinity), a key given twice,
  // vectors of different lengths, negative std, q01 > q99.
  static NormStats load (const std::string &path);
  static NormStats from_json_text (const std::string &text, const std::string &source_name);

  // openpi Normalize on the state before it is padded to the model's 32 dims: `state` is
  // [..., dim] with dim <= the stats' dim (stats are cut to dim, as openpi does). Computed in
  // float64 like numpy; returned in the state's floating dtype (float32 for integer input).
  at::Tensor normalize_state (const at::Tensor &state, NormMode mode) const;

  // openpi Unnormalize on the model's actions [..., dim_padded]: z-score pads mean with 0 and
  // std with 1 beyond the stats' dim; quantile leaves those dims as they are. The result is cut
  // to the robot's `native_dims` (1..dim_padded). Same dtype rules as normalize_state.
  // @model_dtype: the dtype the model computed the actions in (float32 for every backend here):
  // openpi's quantile rule computes (x + 1) / 2 in it, as numpy does on the model's output.
  at::Tensor unnormalize_actions (const at::Tensor &actions, NormMode mode, int native_dims,
                                     at::ScalarType model_dtype = at::kFloat) const;

  // The inverse of unnormalize_actions on actions in robot units [..., d] (d >= 1; dims beyond
  // the stats' are treated as unnormalize_actions treats them): what the model would have
  // output for them, before padding. Used for real-time chunking's prefix (docs/rtc.md).
  at::Tensor normalize_actions (const at::Tensor &actions, NormMode mode) const;

  const NormVectors &state () const { return state_; }
  const NormVectors &actions () const { return actions_; }
  const std::string &source () const { return source_; }
  NormRule rule () const { return rule_; }
  // The modes the file itself names (LeRobot's norm_map for STATE and ACTION); absent for
  // openpi's norm_stats.json, whose mode the caller chooses.
  const std::optional<NormMode> &state_mode () const { return state_mode_; }
  const std::optional<NormMode> &action_mode () const { return action_mode_; }

private:
  friend LeRobotProcessors load_lerobot_processors (const std::string &dir);
  NormVectors state_, actions_;
  std::string source_;
  NormRule rule_ = NormRule::Openpi;
  double eps_ = 1e-6;
  std::optional<NormMode> state_mode_, action_mode_;
};

// What LeRobot's pre- and post-processor pipelines (save_pretrained of PolicyProcessorPipeline:
// policy_preprocessor.json, policy_postprocessor.json and the normalizer steps' .safetensors)
// say about a checkpoint: the statistics with LeRobot's rule and modes (the state's from the
// preprocessor's normalizer, the actions' from the postprocessor's unnormalizer) and how the
// prompt is built.
struct LeRobotProcessors {
  NormStats stats;
  int state_dims = 0;           // the STATE feature's shape
  int action_dims = 0;          // the ACTION feature's shape: what the robot gets
  bool appends_newline = false; // pi0_new_line_processor: task + "\n", tokenized as one text
  bool state_in_prompt = false; // pi05_prepare_state_tokenizer_processor_step
  int max_length = 0;           // tokenizer_processor's max_length (0: no tokenizer step)
};

// True when @dir holds policy_preprocessor.json.
bool has_lerobot_processors (const std::string &dir);
// Reads @dir's processor files. Throws pi0::Error naming the file on a missing or unreadable
// file, bad JSON, a missing normalizer step or statistic, a step this reader does not know (it
// could change the numbers), relative actions (not supported yet), or statistics that do not
// match the features' shapes.
LeRobotProcessors load_lerobot_processors (const std::string &dir);

} // namespace pi0
