/* Pi0 checkpoints on disk: config.json + model.safetensors, through inference/io. */
#include <fstream>
#include <sys/stat.h>

#include "common/pi0file.h"
#include "inference/io/pi0checkpoint.h"
#include "inference/io/pi0error.h"
#include "inference/io/pi0safetensors.h"
#include "inference/model/pi0model.h"
#include "inference/model/pi0policy.h"

namespace pi0
{

ModelKind
model_kind_of (const TensorMap &tensors)
{
  bool pi0 = false, pi05 = false;
  for (const auto &kv : tensors) {
    const std::string &k = kv.first;
    const std::string name = k.rfind ("model.", 0) == 0 ? k.substr (6) : k; // LeRobot's prefix
    if (name == "time_mlp_in.weight")
      pi05 = true;
    else if (name == "state_proj.weight" || name == "action_time_mlp_in.weight")
      pi0 = true;
  }
  return pi0 == pi05 ? ModelKind::Unknown : pi05 ? ModelKind::Pi05 : ModelKind::Pi0;
}

std::shared_ptr<Pi0Model>
load_pi0_model (const std::string &path, int num_steps, std::optional<bool> undeclared_discrete)
{
  std::string dir = is_directory (path) ? path : parent_dir (path);
  std::string weights = is_directory (path) ? dir + "/model.safetensors" : path;
  if (!path_exists (weights))
    throw Error ("no checkpoint at '" + weights +
                 "' (expected a directory with model.safetensors and config.json)");
  std::string config_path = dir + "/config.json";
  if (!path_exists (config_path))
    throw Error ("checkpoint '" + weights + "' has no config.json next to it (" + config_path +
                 "): the architecture cannot be known");
  // The file first (memory-mapped, validated): a corrupt one fails before gigabytes of
  // parameters are allocated. Its key names say pi0 or pi0.5, which openpi's converter does not
  // write into config.json.
  TensorMap tensors = load_safetensors (weights);
  Pi0Config cfg = config_from_json_file (config_path, model_kind_of (tensors), undeclared_discrete);
  if (num_steps > 0)
    cfg.num_steps = num_steps;
  // The architecture against the file before the module tree is built from it: a config.json
  // that describes far more parameters than the file holds (a wrong config, or a hostile one)
  // fails here, in milliseconds, not after its parameters are allocated.
  int64_t held = 0;
  for (const auto &kv : tensors)
    held += kv.second.numel ();
  const int64_t described = cfg.param_counts ().total ();
  if (described > held + held / 2)
    throw Error (config_path + " describes " + std::to_string (described) + " parameters, but " +
                 weights + " holds " + std::to_string (held) +
                 ": the config does not belong to these weights");
  auto model = std::make_shared<Pi0Model> (cfg);
  // Missing, unexpected or mis-shaped tensors come back as one error listing all of them.
  load_state_dict (*model, tensors, weights);
  return model;
}

void
save_pi0_model (const Pi0Model &model, const std::string &dir)
{
  if (!is_directory (dir) && ::mkdir (dir.c_str (), 0755) != 0)
    throw Error ("cannot create checkpoint directory '" + dir + "'");
  TensorMap tensors;
  for (const auto &p : model.named_parameters (true))
    tensors[p.key ()] = p.value ().detach ().to (at::kCPU, at::kFloat);
  save_safetensors (dir + "/model.safetensors", tensors, {{"format", "pt"}, {"writer", "gst-pi0"}});
  std::ofstream out (dir + "/config.json", std::ios::binary | std::ios::trunc);
  out << model.config ().to_json ();
  if (!out)
    throw Error ("cannot write '" + dir + "/config.json'");
}

} // namespace pi0
