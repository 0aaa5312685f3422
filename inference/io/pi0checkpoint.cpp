// Name matching between checkpoint files and modules; see checkpoint.h for the rules.
#include "inference/io/pi0checkpoint.h"

#include <set>
#include <sstream>

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "inference/io/pi0error.h"

namespace pi0
{
namespace
{

const std::string kModelPrefix = "model.";
const std::string kLmHead = "lm_head.weight";
// Where the token embedding sits relative to the lm_head's owner: transformers >= 4.52
// PaliGemma (openpi, LeRobot) and the older Gemma-for-causal-LM layout.
const char *const kEmbedSuffixes[] = {"model.language_model.embed_tokens.weight",
                                      "model.embed_tokens.weight"};

bool
starts_with (const std::string &s, const std::string &p)
{
  return s.compare (0, p.size (), p) == 0;
}
bool
ends_with (const std::string &s, const std::string &p)
{
  return s.size () >= p.size () && s.compare (s.size () - p.size (), p.size (), p) == 0;
}

std::string
shape_text (const torch::Tensor &t)
{
  std::ostringstream s;
  s << '[';
  for (int64_t i = 0; i < t.dim (); i++)
    s << (i ? ", " : "") << t.size (i);
  s << ']';
  return s.str ();
}

// The checkpoint key that stands for module name `name`: as is, or with "model." added or
// removed. Empty when none.
std::string
find_key (const TensorMap &tensors, const std::string &name)
{
  if (tensors.count (name))
    return name;
  if (tensors.count (kModelPrefix + name))
    return kModelPrefix + name;
  if (starts_with (name, kModelPrefix) && tensors.count (name.substr (kModelPrefix.size ())))
    return name.substr (kModelPrefix.size ());
  return {};
}

} // namespace

TensorMap
state_dict (const torch::nn::Module &module)
{
  TensorMap out;
  for (const auto &p : module.named_parameters (true))
    out[p.key ()] = p.value ().detach ();
  for (const auto &b : module.named_buffers (true))
    out[b.key ()] = b.value ().detach ();
  return out;
}

LoadReport
load_state_dict (torch::nn::Module &module, const TensorMap &tensors,
                 const std::string &source_name, const NamePredicate &derived)
{
  std::map<std::string, torch::Tensor> targets;
  for (const auto &p : module.named_parameters (true))
    targets[p.key ()] = p.value ();
  for (const auto &b : module.named_buffers (true))
    targets[b.key ()] = b.value ();

  std::vector<std::string> missing, unexpected, wrong_shape, wrong_kind, duplicates;
  LoadReport report;

  // 1. Each checkpoint key to the module name it stands for.
  std::map<std::string, std::string> source_of; // module name -> checkpoint key
  std::set<std::string> spare_lm_heads;         // checkpoint lm_head keys with no module name
  for (const auto &[key, value] : tensors) {
    std::string name;
    if (targets.count (key))
      name = key;
    else if (starts_with (key, kModelPrefix) && targets.count (key.substr (kModelPrefix.size ())))
      name = key.substr (kModelPrefix.size ());
    else if (targets.count (kModelPrefix + key))
      name = kModelPrefix + key;
    if (name.empty ()) {
      if (ends_with (key, kLmHead))
        spare_lm_heads.insert (key);
      else
        unexpected.push_back (key + " " + (value.defined () ? shape_text (value) : "(undefined)"));
      continue;
    }
    auto [it, fresh] = source_of.emplace (name, key);
    if (!fresh)
      duplicates.push_back (name + " (given as both '" + it->second + "' and '" + key + "')");
  }

  // 2. Tied lm_head <-> token embedding: fill whichever the file lacks from the other.
  std::set<std::string> used_lm_heads;
  for (const auto &[name, target] : targets) {
    if (source_of.count (name))
      continue;
    std::string partner; // the checkpoint key to fill `name` from
    if (ends_with (name, kLmHead)) {
      const std::string owner = name.substr (0, name.size () - kLmHead.size ());
      for (const char *suffix : kEmbedSuffixes) {
        auto it = source_of.find (owner + suffix);
        if (it != source_of.end ())
          partner = it->second;
        if (partner.empty ())
          partner = find_key (tensors, owner + suffix);
        if (!partner.empty ())
          break;
      }
    } else {
      for (const char *suffix : kEmbedSuffixes) {
        if (!ends_with (name, suffix))
          continue;
        const std::string owner = name.substr (0, name.size () - std::string (suffix).size ());
        partner = find_key (tensors, owner + kLmHead);
        if (!partner.empty ())
          break;
      }
    }
    if (!partner.empty ()) {
      source_of[name] = partner;
      report.tied.push_back (name);
      used_lm_heads.insert (partner);
    }
  }
  for (const auto &k : spare_lm_heads)
    if (!used_lm_heads.count (k))
      report.ignored.push_back (k);

  // 3. Shapes and kinds.
  for (const auto &[name, target] : targets) {
    auto it = source_of.find (name);
    if (it == source_of.end ()) {
      if (derived && derived (name))
        continue;
      missing.push_back (name + " " + shape_text (target));
      continue;
    }
    const torch::Tensor &src = tensors.at (it->second);
    if (!src.defined ()) {
      wrong_kind.push_back (name + ": checkpoint tensor '" + it->second + "' is undefined");
      continue;
    }
    if (src.sizes () != target.sizes ()) {
      wrong_shape.push_back (name + ": model " + shape_text (target) + ", checkpoint " +
                             shape_text (src) +
                             (it->second != name ? " (from '" + it->second + "')" : ""));
      continue;
    }
    const bool tf = torch::isFloatingType (target.scalar_type ());
    const bool sf = torch::isFloatingType (src.scalar_type ());
    if (tf != sf || (!tf && target.scalar_type () != src.scalar_type ()))
      wrong_kind.push_back (name + ": model " + c10::toString (target.scalar_type ()) +
                            ", checkpoint " + c10::toString (src.scalar_type ()));
  }

  const size_t problems = missing.size () + unexpected.size () + wrong_shape.size () +
                          wrong_kind.size () + duplicates.size ();
  if (problems > 0) {
    std::ostringstream msg;
    msg << source_name << ": checkpoint does not match the model (" << missing.size ()
        << " missing, " << unexpected.size () << " unexpected, " << wrong_shape.size ()
        << " wrong shape, " << wrong_kind.size () << " wrong dtype, " << duplicates.size ()
        << " duplicated)";
    if (source_of.empty () && !targets.empty () && !tensors.empty ())
      msg << "\n  no checkpoint name matches a model name: is this a Pi0 checkpoint, and the right "
             "config?";
    for (const auto &s : missing)
      msg << "\n  missing: " << s;
    for (const auto &s : unexpected)
      msg << "\n  unexpected: " << s;
    for (const auto &s : wrong_shape)
      msg << "\n  wrong shape: " << s;
    for (const auto &s : wrong_kind)
      msg << "\n  wrong dtype: " << s;
    for (const auto &s : duplicates)
      msg << "\n  duplicated: " << s;
    throw Error (msg.str ());
  }

  // 4. Everything matches: copy (converting dtype and device).
  torch::NoGradGuard no_grad;
  for (auto &[name, target] : targets) {
    auto it = source_of.find (name);
    if (it == source_of.end ())
      continue; // a derived buffer the file does not hold
    target.copy_ (tensors.at (it->second));
    report.loaded++;
  }
  return report;
}

LoadReport
load_checkpoint (torch::nn::Module &module, const std::string &path, const NamePredicate &derived)
{
  return load_state_dict (module, load_safetensors (path), path, derived);
}

} // namespace pi0
