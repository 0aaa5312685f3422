// openpi norm_stats.json and its Normalize / Unnormalize formulas (openpi src/openpi/transforms.py).
#include "inference/io/pi0normstats.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <torch/types.h>

#include "inference/io/pi0error.h"
#include "common/pi0file.h"
#include "common/pi0json.h"

namespace pi0
{
namespace
{

// openpi's epsilon in both formulas (numpy float64 arithmetic).
constexpr double kEps = 1e-6;

using Json = pi0::json::Value;

torch::Tensor
read_vector (const Json &stats, const char *field, const std::string &where, bool required)
{
  auto it = stats.find (field);
  if (it == stats.end () || it->is_null ()) {
    if (required)
      throw Error (where + ": missing \"" + field + "\"");
    return {};
  }
  const Json &v = *it;
  if (!v.is_array () || v.empty ())
    throw Error (where + ": \"" + field + "\" must be a non-empty list of numbers, found " +
                 (v.is_array () ? std::string ("[]") : std::string (v.type_name ())));
  std::vector<double> values;
  for (size_t i = 0; i < v.size (); i++) {
    // Each value must be a number that float32 can hold: the state is normalized and the actions
    // unnormalized into float32, where 1e39 becomes infinity (as NaN does, it would reach the
    // robot as a non-finite action). The value itself is kept in float64, as openpi computes.
    float unused;
    std::string error;
    if (!pi0::json::to_float (v[i], "\"" + std::string (field) + "\"[" + std::to_string (i) + "]",
                              &unused, &error))
      throw Error (where + ": " + error +
                   (v[i].is_number () ? "" : "; the stats must be a flat list of numbers"));
    values.push_back (v[i].get<double> ());
  }
  return torch::tensor (values, torch::kFloat64);
}

NormVectors
read_key (const Json &all, const char *key, const std::string &source)
{
  const std::string where = source + ": norm_stats." + key;
  if (!all.contains (key))
    throw Error (source + ": \"norm_stats\" has no \"" + key + "\" entry");
  const auto &stats = all[key];
  if (!stats.is_object ())
    throw Error (where + " must be an object with mean, std, q01, q99");
  NormVectors nv;
  nv.mean = read_vector (stats, "mean", where, true);
  nv.std = read_vector (stats, "std", where, true);
  auto q01 = read_vector (stats, "q01", where, false);
  auto q99 = read_vector (stats, "q99", where, false);
  if (q01.defined () != q99.defined ())
    throw Error (where + ": has " + (q01.defined () ? "q01 but no q99" : "q99 but no q01"));
  const int64_t dim = nv.mean.size (0);
  auto check_dim = [&] (const torch::Tensor &t, const char *name) {
    if (t.size (0) != dim)
      throw Error (where + ": \"" + name + "\" has " + std::to_string (t.size (0)) +
                   " values but \"mean\" has " + std::to_string (dim));
  };
  check_dim (nv.std, "std");
  if (nv.std.lt (0).any ().item<bool> ())
    throw Error (where + ": \"std\" has a negative value");
  if (q01.defined ()) {
    check_dim (q01, "q01");
    check_dim (q99, "q99");
    if (q01.gt (q99).any ().item<bool> ())
      throw Error (where + ": \"q01\" is above \"q99\" in some dimension");
    nv.q01 = q01;
    nv.q99 = q99;
  }
  return nv;
}

torch::ScalarType
result_dtype (const torch::Tensor &x)
{
  return torch::isFloatingType (x.scalar_type ()) ? x.scalar_type () : torch::kFloat32;
}

void
require_quantiles (const NormVectors &nv, const std::string &source, const char *key)
{
  if (!nv.q01)
    throw Error (source + ": quantile normalization needs \"q01\" and \"q99\" for \"" + key +
                 "\", which this file does not have (use z-score, or recompute the stats)");
}

// The z-score mean and std of @nv for @width dims, on @dev: beyond the stats' dims openpi pads
// mean with 0 and std with 1 (float64, as numpy computes).
struct PaddedZScore {
  torch::Tensor mean, std;
};

PaddedZScore
padded_zscore (const NormVectors &nv, int64_t width, const torch::Device &dev)
{
  const int64_t s = std::min<int64_t> (nv.dim (), width);
  auto mean = torch::zeros ({width}, torch::kFloat64);
  auto sd = torch::ones ({width}, torch::kFloat64);
  mean.slice (0, 0, s).copy_ (nv.mean.slice (0, 0, s));
  sd.slice (0, 0, s).copy_ (nv.std.slice (0, 0, s));
  return {mean.to (dev), sd.to (dev)};
}

/* The per-dim statistics a mode reads, cut to @d dims: (lo, range) for the [-1, 1] modes,
 * (mean, std) for z-score. */
struct Affine {
  torch::Tensor lo, range, mean, std;
};

Affine
affine_of (const NormVectors &nv, NormMode mode, int64_t d, const std::string &source,
           const char *key)
{
  auto cut = [&] (const torch::Tensor &t) {
    return t.slice (0, 0, d);
  };
  auto need = [&] (const std::optional<torch::Tensor> &a, const std::optional<torch::Tensor> &b,
                   const char *names) {
    if (!a || !b)
      throw Error (source + ": " + norm_mode_name (mode) + " normalization needs " + names +
                   " for \"" + key + "\", which this file does not have");
  };
  Affine f;
  switch (mode) {
    case NormMode::ZScore:
      f.mean = cut (nv.mean);
      f.std = cut (nv.std);
      break;
    case NormMode::Quantile:
      require_quantiles (nv, source, key);
      f.lo = cut (*nv.q01);
      f.range = cut (*nv.q99) - f.lo;
      break;
    case NormMode::MinMax:
      need (nv.min, nv.max, "\"min\" and \"max\"");
      f.lo = cut (*nv.min);
      f.range = cut (*nv.max) - f.lo;
      break;
    case NormMode::Quantile10:
      need (nv.q10, nv.q90, "\"q10\" and \"q90\"");
      f.lo = cut (*nv.q10);
      f.range = cut (*nv.q90) - f.lo;
      break;
    case NormMode::Identity:
      break;
  }
  return f;
}

/* LeRobot's _NormalizationMixin._apply_transform, in float32 and in its order of operations (the
 * statistics are float32 in its files, held here widened exactly). */
torch::Tensor
lerobot_transform (const torch::Tensor &x_in, NormMode mode, const Affine &f, double eps,
                   bool inverse)
{
  const torch::Tensor x = x_in.to (torch::kFloat32);
  const auto dev = x.device ();
  auto f32 = [&] (const torch::Tensor &t) {
    return t.to (dev, torch::kFloat32);
  };
  if (mode == NormMode::Identity)
    return x;
  if (mode == NormMode::ZScore)
    return inverse ? x * f32 (f.std) + f32 (f.mean) : (x - f32 (f.mean)) / (f32 (f.std) + eps);
  torch::Tensor range = f32 (f.range);
  range = torch::where (range == 0, torch::full_like (range, eps), range);
  const torch::Tensor lo = f32 (f.lo);
  if (mode == NormMode::MinMax)
    return inverse ? (x + 1) / 2 * range + lo : 2 * (x - lo) / range - 1;
  return inverse ? (x + 1.0) * range / 2.0 + lo : 2.0 * (x - lo) / range - 1.0;
}

void
require_openpi_mode (NormMode mode, const std::string &source)
{
  if (mode == NormMode::MinMax || mode == NormMode::Quantile10)
    throw Error (source + ": " + norm_mode_name (mode) +
                 " normalization is LeRobot's; openpi's norm stats have zscore and quantile");
}

} // namespace

NormMode
norm_mode_from_string (const std::string &name)
{
  if (name == "zscore" || name == "z-score" || name == "mean_std")
    return NormMode::ZScore;
  if (name == "quantile" || name == "quantiles")
    return NormMode::Quantile;
  throw Error ("unknown normalization mode '" + name + "' (expected zscore or quantile)");
}

const char *
norm_mode_name (NormMode mode)
{
  switch (mode) {
    case NormMode::ZScore:
      return "zscore";
    case NormMode::Quantile:
      return "quantile";
    case NormMode::MinMax:
      return "min-max";
    case NormMode::Quantile10:
      return "quantile10";
    case NormMode::Identity:
      break;
  }
  return "identity";
}

NormStats
NormStats::load (const std::string &path)
{
  std::string file = path;
  if (is_directory (path)) {
    file = path + "/norm_stats.json";
    if (!path_exists (file) && has_lerobot_processors (path))
      return load_lerobot_processors (path).stats;
  }
  std::string text, err;
  if (!read_regular_file (file, kMaxConfigFileBytes, &text, &err))
    throw Error ("cannot read norm stats " + err);
  return from_json_text (text, file);
}

NormStats
NormStats::from_json_text (const std::string &text, const std::string &source_name)
{
  std::string error;
  std::optional<Json> parsed = pi0::json::parse_strict (text, source_name, &error);
  if (!parsed)
    throw Error (error);
  const Json &j = *parsed;
  if (!j.is_object () || !j.contains ("norm_stats") || !j["norm_stats"].is_object ())
    throw Error (source_name + ": no \"norm_stats\" object at the top level (expected openpi's "
                               "{\"norm_stats\": {\"state\": {...}, \"actions\": {...}}})");
  NormStats ns;
  ns.source_ = source_name;
  ns.state_ = read_key (j["norm_stats"], "state", source_name);
  ns.actions_ = read_key (j["norm_stats"], "actions", source_name);
  return ns;
}

torch::Tensor
NormStats::normalize_state (const torch::Tensor &state, NormMode mode) const
{
  if (!state.defined () || state.dim () < 1 || state.size (-1) < 1)
    throw Error (source_ + ": the state to normalize must have at least one dimension");
  const int64_t d = state.size (-1);
  if (d > state_.dim ())
    throw Error (source_ + ": the state has " + std::to_string (d) +
                 " dims but the norm stats for \"state\" have " + std::to_string (state_.dim ()) +
                 " (normalize before padding to the model's dims)");
  if (rule_ == NormRule::LeRobot)
    return lerobot_transform (state, mode, affine_of (state_, mode, d, source_, "state"), eps_,
                              false);
  require_openpi_mode (mode, source_);
  if (mode == NormMode::Identity)
    return state.to (result_dtype (state));
  const auto dev = state.device ();
  const auto cut = [&] (const torch::Tensor &t) {
    return t.slice (0, 0, d).to (dev);
  };
  const torch::Tensor x = state.to (torch::kFloat64);
  torch::Tensor y;
  if (mode == NormMode::ZScore) {
    y = (x - cut (state_.mean)) / (cut (state_.std) + kEps);
  } else {
    require_quantiles (state_, source_, "state");
    const auto q01 = cut (*state_.q01), q99 = cut (*state_.q99);
    y = (x - q01) / (q99 - q01 + kEps) * 2.0 - 1.0;
  }
  return y.to (result_dtype (state));
}

torch::Tensor
NormStats::unnormalize_actions (const torch::Tensor &actions, NormMode mode, int native_dims,
                                torch::ScalarType model_dtype) const
{
  if (!actions.defined () || actions.dim () < 1 || actions.size (-1) < 1)
    throw Error (source_ + ": the actions to unnormalize must have at least one dimension");
  const int64_t a = actions.size (-1);
  const int64_t s = actions_.dim ();
  if (s > a)
    throw Error (source_ + ": the norm stats for \"actions\" have " + std::to_string (s) +
                 " dims but the model gives " + std::to_string (a));
  if (native_dims < 1 || native_dims > a)
    throw Error (source_ + ": native action dims " + std::to_string (native_dims) + " outside 1.." +
                 std::to_string (a));
  if (rule_ == NormRule::LeRobot) {
    // LeRobot cuts the model's padded dims to the robot's first, then unnormalizes those.
    torch::Tensor y = actions.slice (-1, 0, native_dims).to (torch::kFloat32).clone ();
    const int64_t n = std::min<int64_t> (s, native_dims);
    y.slice (-1, 0, n).copy_ (lerobot_transform (
        y.slice (-1, 0, n), mode, affine_of (actions_, mode, n, source_, "actions"), eps_, true));
    return y.contiguous ();
  }
  require_openpi_mode (mode, source_);
  if (mode == NormMode::Identity)
    return actions.slice (-1, 0, native_dims).contiguous ().to (result_dtype (actions));
  const auto dev = actions.device ();
  const torch::Tensor x = actions.to (torch::kFloat64);
  torch::Tensor y;
  if (mode == NormMode::ZScore) {
    const auto z = padded_zscore (actions_, a, dev);
    y = x * (z.std + kEps) + z.mean;
  } else {
    require_quantiles (actions_, source_, "actions");
    const auto q01 = actions_.q01->to (dev), q99 = actions_.q99->to (dev);
    y = x.clone ();
    // numpy computes (x + 1.0) / 2.0 in the model output's dtype (a float32 array and a
    // Python float), and only the product with the float64 range in float64: so here too.
    const torch::Tensor half =
        (x.slice (-1, 0, s) + 1.0).to (model_dtype).to (torch::kFloat64) / 2.0;
    y.slice (-1, 0, s).copy_ (half * (q99 - q01 + kEps) + q01);
  }
  return y.slice (-1, 0, native_dims).contiguous ().to (result_dtype (actions));
}

torch::Tensor
NormStats::normalize_actions (const torch::Tensor &actions, NormMode mode) const
{
  if (!actions.defined () || actions.dim () < 1 || actions.size (-1) < 1)
    throw Error (source_ + ": the actions to normalize must have at least one dimension");
  const int64_t a = actions.size (-1);
  const int64_t s = std::min<int64_t> (actions_.dim (), a);
  if (rule_ == NormRule::LeRobot) { // the normalizer's forward formula, as for the state
    torch::Tensor y = actions.to (torch::kFloat32).clone ();
    y.slice (-1, 0, s).copy_ (lerobot_transform (
        y.slice (-1, 0, s), mode, affine_of (actions_, mode, s, source_, "actions"), eps_, false));
    return y;
  }
  require_openpi_mode (mode, source_);
  if (mode == NormMode::Identity)
    return actions.to (result_dtype (actions));
  const auto dev = actions.device ();
  const torch::Tensor x = actions.to (torch::kFloat64);
  torch::Tensor y;
  if (mode == NormMode::ZScore) {
    const auto z = padded_zscore (actions_, a, dev);
    y = (x - z.mean) / (z.std + kEps);
  } else {
    require_quantiles (actions_, source_, "actions");
    const auto q01 = actions_.q01->slice (0, 0, s).to (dev);
    const auto q99 = actions_.q99->slice (0, 0, s).to (dev);
    y = x.clone ();
    y.slice (-1, 0, s).copy_ ((x.slice (-1, 0, s) - q01) / (q99 - q01 + kEps) * 2.0 - 1.0);
  }
  return y.to (result_dtype (actions));
}

} // namespace pi0
