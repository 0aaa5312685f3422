// Loading a checkpoint's tensors into a torch::nn::Module by parameter/buffer name, with the
// key conventions of openpi-PyTorch and LeRobot Pi0 checkpoints (see docs/checkpoints.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "inference/io/pi0safetensors.h"

namespace torch::nn
{
class Module;
}

namespace pi0
{

// What load_state_dict did besides the one-to-one copies.
struct LoadReport {
  size_t loaded = 0;                // module tensors filled
  std::vector<std::string> tied;    // module tensors filled from their tied partner
  std::vector<std::string> ignored; // checkpoint tensors not used (unused tied lm_head copies)
};

// Loads `tensors` into `module`'s named_parameters() and named_buffers() by name:
//  - a leading "model." (LeRobot's PI0Policy wraps the network as `model`) is stripped when the
//    module's names lack it, and added when the module's names have it and the file lacks it;
//  - PaliGemma's lm_head is tied to the token embedding (openpi and LeRobot save either one or
//    both): "<p>lm_head.weight" and "<p>model.language_model.embed_tokens.weight" (and the older
//    "<p>model.embed_tokens.weight") stand in for each other when one is missing, and an
//    lm_head the module does not have is ignored, as is the action expert's unused lm_head;
//  - floating-point tensors are converted to the parameter's dtype (and device); integer and
//    bool tensors must match exactly.
// Nothing is copied unless everything matches: on any missing, unexpected, duplicated (same name
// with and without "model."), mis-shaped or wrong-kind tensor it throws ONE pi0::Error that
// names `source_name` and lists all of them with expected vs found shapes.
//
// LibTorch has no non-persistent buffers: a module that registers derived buffers (RoPE
// frequency tables, position ids) passes `derived`, which returns true for those names; they
// are loaded when the file has them and are not "missing" when it has not.
using NamePredicate = std::function<bool (const std::string &)>;
LoadReport load_state_dict (torch::nn::Module &module, const TensorMap &tensors,
                            const std::string &source_name, const NamePredicate &derived = {});

// load_safetensors(path) + load_state_dict(module, ..., path).
LoadReport load_checkpoint (torch::nn::Module &module, const std::string &path,
                            const NamePredicate &derived = {});

// The module's parameters and buffers by name (detached; sharing the module's storage), ready
// for save_safetensors().
TensorMap state_dict (const torch::nn::Module &module);

} // namespace pi0
