// openpi normalization statistics (assets/<asset_id>/norm_stats.json) and the Normalize /
// Unnormalize transforms of openpi's transforms.py, for the robot state and the actions.
#pragma once

#include <optional>
#include <string>

#include <torch/torch.h>

namespace pi0
{

// ZScore: (x - mean) / (std + 1e-6), used by pi0. Quantile: maps [q01, q99] to [-1, 1] as
// (x - q01) / (q99 - q01 + 1e-6) * 2 - 1, used by pi05 and pi0-FAST.
enum class NormMode { ZScore, Quantile };

// Parses "zscore" / "z-score" / "mean_std" and "quantile" / "quantiles"; throws pi0::Error otherwise.
NormMode norm_mode_from_string (const std::string &name);
const char *norm_mode_name (NormMode mode);

// The statistics of one key ("state" or "actions"): float64 CPU vectors of the native dim.
struct NormVectors {
  torch::Tensor mean, std;
  std::optional<torch::Tensor> q01, q99; // absent in some files; required by Quantile
  int64_t dim () const { return mean.size (0); }
};

class NormStats
{
public:
  // Reads openpi's {"norm_stats": {"state": {"mean", "std", "q01", "q99"}, "actions": {...}}}.
  // `path` is the JSON file or a directory holding norm_stats.json. Throws pi0::Error naming
  // the file and the problem: not JSON, missing key, non-numeric, non-finite or empty vector,
  // a value beyond float32's range (1e39: it would become infinity), a key given twice,
  // vectors of different lengths, negative std, q01 > q99.
  static NormStats load (const std::string &path);
  static NormStats from_json_text (const std::string &text, const std::string &source_name);

  // openpi Normalize on the state before it is padded to the model's 32 dims: `state` is
  // [..., dim] with dim <= the stats' dim (stats are cut to dim, as openpi does). Computed in
  // float64 like numpy; returned in the state's floating dtype (float32 for integer input).
  torch::Tensor normalize_state (const torch::Tensor &state, NormMode mode) const;

  // openpi Unnormalize on the model's actions [..., dim_padded]: z-score pads mean with 0 and
  // std with 1 beyond the stats' dim; quantile leaves those dims as they are. The result is cut
  // to the robot's `native_dims` (1..dim_padded). Same dtype rules as normalize_state.
  torch::Tensor unnormalize_actions (const torch::Tensor &actions, NormMode mode,
                                     int native_dims) const;

  // The inverse of unnormalize_actions on actions in robot units [..., d] (d >= 1; dims beyond
  // the stats' are treated as unnormalize_actions treats them): what the model would have
  // output for them, before padding. Used for real-time chunking's prefix (docs/rtc.md).
  torch::Tensor normalize_actions (const torch::Tensor &actions, NormMode mode) const;

  const NormVectors &state () const { return state_; }
  const NormVectors &actions () const { return actions_; }
  const std::string &source () const { return source_; }

private:
  NormVectors state_, actions_;
  std::string source_;
};

} // namespace pi0
