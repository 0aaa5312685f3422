// LeRobot's processor pipelines as save_pretrained() writes them (lerobot.processor.pipeline):
// {"name": ..., "steps": [{"registry_name": ..., "config": {...}, "state_file": ...}, ...]},
// the normalizer steps' statistics in the state files as "<feature>.<stat>" tensors.
#include <set>
#include <vector>

#include <torch/types.h>

#include "inference/io/pi0error.h"
#include "inference/io/pi0normstats.h"
#include "inference/io/pi0safetensors.h"
#include "common/pi0file.h"
#include "common/pi0json.h"

namespace pi0
{

namespace
{

using Json = pi0::json::Value;

const char kPre[] = "policy_preprocessor.json";
const char kPost[] = "policy_postprocessor.json";

Json
read_pipeline (const std::string &path)
{
  std::string text, err;
  if (!read_regular_file (path, size_t (4) << 20, &text, &err))
    throw Error ("cannot read LeRobot processor file " + err);
  std::optional<Json> root = pi0::json::parse_strict (text, path, &err);
  if (!root)
    throw Error (err);
  if (!root->is_object () || !root->contains ("steps") || !(*root)["steps"].is_array ())
    throw Error (path + ": not a LeRobot processor pipeline (no \"steps\" list)");
  return std::move (*root);
}

/* The steps this reader knows. Any other could change the numbers (a custom step registered by
 * a user's code): refused, naming it, rather than skipped. */
const std::set<std::string> &
known_steps ()
{
  static const std::set<std::string> k = {
      "rename_observations_processor", "to_batch_processor",
      "relative_actions_processor",    "normalizer_processor",
      "unnormalizer_processor",        "absolute_actions_processor",
      "pi0_new_line_processor",        "pi05_prepare_state_tokenizer_processor_step",
      "tokenizer_processor",           "device_processor"};
  return k;
}

NormMode
mode_of (const Json &norm_map, const char *type, const std::string &where)
{
  auto it = norm_map.find (type);
  if (it == norm_map.end ())
    return NormMode::Identity; // LeRobot: a type without a mode is left as it is
  const std::string m = it->is_string () ? it->get<std::string> () : std::string ();
  if (m == "MEAN_STD")
    return NormMode::ZScore;
  if (m == "QUANTILES")
    return NormMode::Quantile;
  if (m == "MIN_MAX")
    return NormMode::MinMax;
  if (m == "QUANTILE10")
    return NormMode::Quantile10;
  if (m == "IDENTITY")
    return NormMode::Identity;
  throw Error (where + ": unknown normalization mode " + it->dump () + " for " + type);
}

/* The one feature of @type ("STATE", "ACTION") in a normalizer step's features: its key and
 * its length. Empty key when there is none. */
std::pair<std::string, int>
feature_of (const Json &features, const char *type, const std::string &where)
{
  std::pair<std::string, int> found{"", 0};
  for (const auto &kv : features.items ()) {
    const Json &f = kv.value ();
    if (!f.is_object () || !f.contains ("type") || f["type"] != type)
      continue;
    if (!found.first.empty ())
      throw Error (where + ": two " + type + " features (" + found.first + ", " + kv.key () +
                   "); one is supported");
    const Json *shape = f.contains ("shape") ? &f["shape"] : nullptr;
    if (!shape || !shape->is_array () || shape->size () != 1 || !(*shape)[0].is_number_integer () ||
        (*shape)[0].get<int64_t> () < 1 || (*shape)[0].get<int64_t> () > 65536)
      throw Error (where + ": feature " + kv.key () + " must have a shape [n], found " +
                   (shape ? shape->dump () : std::string ("none")));
    found = {kv.key (), static_cast<int> ((*shape)[0].get<int64_t> ())};
  }
  return found;
}

/* The statistics of @key (in @file) that normalization @mode reads, as LeRobot's
 * _NormalizationMixin names them; LeRobot raises when one is missing ("MEAN_STD normalization
 * mode requires mean and std stats"), and so does this reader, at load rather than on the first
 * observation. */
std::vector<const char *>
required_stats (NormMode mode)
{
  switch (mode) {
    case NormMode::ZScore:
      return {"mean", "std"};
    case NormMode::MinMax:
      return {"min", "max"};
    case NormMode::Quantile:
      return {"q01", "q99"};
    case NormMode::Quantile10:
      return {"q10", "q90"};
    case NormMode::Identity:
      break;
  }
  return {};
}

/* A normalizer step's statistics of @key: "<key>.mean" ... as float64 vectors of @dim; those
 * @mode needs must be there. */
NormVectors
vectors_of (const TensorMap &t, const std::string &key, int dim, NormMode mode,
            const char *mode_name, const std::string &file)
{
  NormVectors nv;
  auto get = [&] (const char *stat) -> std::optional<torch::Tensor> {
    auto it = t.find (key + "." + stat);
    if (it == t.end ())
      return std::nullopt;
    const torch::Tensor &v = it->second;
    const std::string name = "\"" + key + "." + stat + "\"";
    if (!torch::isFloatingType (v.scalar_type ()))
      throw Error (file + ": " + name + " must hold floats, found " +
                   c10::toString (v.scalar_type ()) + " values");
    if (v.numel () != dim)
      throw Error (file + ": " + name + " must hold " + std::to_string (dim) +
                   " floats (the feature's shape), found " + std::to_string (v.numel ()));
    torch::Tensor d = v.reshape ({dim}).to (torch::kFloat64).clone ();
    if (!torch::isfinite (d).all ().item<bool> ())
      throw Error (file + ": " + name + " has a non-finite value");
    return d;
  };
  for (const char *stat : required_stats (mode))
    if (!t.count (key + "." + stat))
      throw Error (file + ": " + mode_name + " normalization of \"" + key + "\" needs \"" + key +
                   "." + stat + "\", which this file does not have");
  auto mean = get ("mean"), std = get ("std");
  nv.mean = mean ? *mean : torch::zeros ({dim}, torch::kFloat64);
  nv.std = std ? *std : torch::ones ({dim}, torch::kFloat64);
  nv.q01 = get ("q01");
  nv.q99 = get ("q99");
  nv.min = get ("min");
  nv.max = get ("max");
  nv.q10 = get ("q10");
  nv.q90 = get ("q90");
  if (!mean && !nv.q01 && !nv.min && !nv.q10)
    throw Error (file + ": no statistics for \"" + key + "\"");
  return nv;
}

/* The statistics of @step (a normalizer or unnormalizer), from its state file beside @pipeline. */
TensorMap
step_tensors (const Json &step, const std::string &dir, const std::string &pipeline)
{
  if (!step.contains ("state_file") || !step["state_file"].is_string ())
    throw Error (pipeline + ": the " + step["registry_name"].get<std::string> () +
                 " step names no state_file (its statistics)");
  const std::string name = step["state_file"].get<std::string> ();
  if (name.empty () || name.find ('/') != std::string::npos || name[0] == '.')
    throw Error (pipeline + ": state_file \"" + name + "\" is not a file name in the checkpoint");
  return load_safetensors (dir + "/" + name);
}

void
check_disabled (const Json &step, const std::string &where)
{
  const Json &c = step.contains ("config") ? step["config"] : Json ();
  if (c.is_object () && c.contains ("enabled") && c["enabled"].is_boolean () &&
      c["enabled"].get<bool> ())
    throw Error (where + ": the checkpoint uses relative actions (" +
                 step["registry_name"].get<std::string> () +
                 " enabled), which gst-pi0 does not support yet");
}

} // namespace

bool
has_lerobot_processors (const std::string &dir)
{
  return path_exists (dir + "/" + kPre);
}

LeRobotProcessors
load_lerobot_processors (const std::string &dir)
{
  const std::string pre_path = dir + "/" + kPre, post_path = dir + "/" + kPost;
  const Json pre = read_pipeline (pre_path);
  if (!path_exists (post_path))
    throw Error (dir + " has " + kPre + " but no " + kPost +
                 ": the actions could not be unnormalized");
  const Json post = read_pipeline (post_path);

  LeRobotProcessors out;
  NormStats &ns = out.stats;
  ns.rule_ = NormRule::LeRobot;
  ns.source_ = pre_path + " + " + post_path;
  bool have_state = false, have_actions = false;
  for (const auto *pipe : {&pre, &post}) {
    const std::string &path = pipe == &pre ? pre_path : post_path;
    for (const Json &step : (*pipe)["steps"]) {
      if (!step.is_object () || !step.contains ("registry_name") ||
          !step["registry_name"].is_string ())
        throw Error (path + ": a step without a registry_name");
      const std::string name = step["registry_name"].get<std::string> ();
      if (!known_steps ().count (name))
        throw Error (path + ": unknown processor step \"" + name +
                     "\" (it could change the observation or the actions; gst-pi0 knows "
                     "LeRobot's pi0 and pi05 pipelines)");
      const Json cfg = step.contains ("config") && step["config"].is_object () ? step["config"]
                                                                               : Json::object ();
      if (name == "relative_actions_processor" || name == "absolute_actions_processor") {
        check_disabled (step, path);
      } else if (name == "pi0_new_line_processor") {
        out.appends_newline = true;
      } else if (name == "pi05_prepare_state_tokenizer_processor_step") {
        out.state_in_prompt = true;
      } else if (name == "tokenizer_processor") {
        if (cfg.contains ("max_length") && cfg["max_length"].is_number_integer ())
          out.max_length = static_cast<int> (cfg["max_length"].get<int64_t> ());
      } else if (name == "normalizer_processor" || name == "unnormalizer_processor") {
        const std::string where = path + " (" + name + ")";
        const Json features =
            cfg.contains ("features") && cfg["features"].is_object () ? cfg["features"] : Json ();
        const Json norm_map =
            cfg.contains ("norm_map") && cfg["norm_map"].is_object () ? cfg["norm_map"] : Json ();
        if (!features.is_object () || !norm_map.is_object ())
          throw Error (where + ": no features or norm_map");
        if (cfg.contains ("eps")) {
          if (!cfg["eps"].is_number () || !(cfg["eps"].get<double> () >= 0))
            throw Error (where + ": eps must be a number >= 0, found " + cfg["eps"].dump ());
          ns.eps_ = cfg["eps"].get<double> ();
        } else {
          ns.eps_ = 1e-8; // LeRobot's default
        }
        const TensorMap t = step_tensors (step, dir, path);
        const std::string file = dir + "/" + step["state_file"].get<std::string> ();
        const bool state = name == "normalizer_processor";
        const char *type = state ? "STATE" : "ACTION";
        auto [key, dim] = feature_of (features, type, where);
        if (key.empty ())
          throw Error (where + ": no " + type + " feature");
        const NormMode mode = mode_of (norm_map, type, where);
        (state ? ns.state_mode_ : ns.action_mode_) = mode;
        (state ? ns.state_ : ns.actions_) = vectors_of (
            t, key, dim, mode,
            mode == NormMode::Identity ? "IDENTITY"
                                       : norm_map.at (type).get<std::string> ().c_str (),
            file);
        (state ? out.state_dims : out.action_dims) = dim;
        (state ? have_state : have_actions) = true;
      }
    }
  }
  if (!have_state)
    throw Error (pre_path + ": no normalizer_processor step (the state's statistics)");
  if (!have_actions)
    throw Error (post_path + ": no unnormalizer_processor step (the actions' statistics)");
  return out;
}

} // namespace pi0
