/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "serve/pi0mapping.h"

#include "common/pi0json.h"
#include "common/pi0transformnames.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

namespace pi0::serve
{

namespace
{

/* openpi's examples (examples/aloha_real, examples/aloha_sim, examples/droid, examples/libero
 * and examples/simple_client), keys as their clients send them. ALOHA's wrist cameras may be
 * missing (openpi masks them), its fourth camera `cam_low` is not a Pi0 input. The transforms
 * and default prompts are those of openpi's configs (src/openpi/training/config.py: pi0_aloha,
 * pi0_aloha_towel, ..., pi0_droid, pi0_libero; tests/libs/serve/test_serve_codec.cpp checks them against
 * what tests/parity/make_openpi_transforms_golden.py read there). */
std::string
aloha (const std::string &name, const std::string &transforms, const std::string &prompt)
{
  return R"({
  "name": ")" +
         name + R"(",
  "views": {"main": ["images", "cam_high"], "side": ["images", "cam_left_wrist"],
            "top": ["images", "cam_right_wrist"]},
  "optional_views": ["side", "top"],
  "state": ["state"],
  "state_dim": 14,
  "prompt": "prompt",
  "action_dim": 14,
  "ignore": [["images", "cam_low"]],
  "transforms": ")" +
         transforms + "\"" +
         (prompt.empty () ? "" : ",\n  \"default_prompt\": \"" + prompt + "\"") + "\n}\n";
}

const std::vector<std::pair<std::string, std::string>> &
presets ()
{
  static const std::vector<std::pair<std::string, std::string>> kPresets = {
      {"aloha", aloha ("aloha", "aloha", "")},
      {"droid", R"({
  "name": "droid",
  "views": {"main": "observation/exterior_image_1_left", "side": "observation/wrist_image_left"},
  "state": ["observation/joint_position", "observation/gripper_position"],
  "state_dim": 8,
  "prompt": "prompt",
  "action_dim": 8,
  "transforms": "droid"
}
)"},
      {"libero", R"({
  "name": "libero",
  "views": {"main": "observation/image", "side": "observation/wrist_image"},
  "state": ["observation/state"],
  "state_dim": 8,
  "prompt": "prompt",
  "action_dim": 7,
  "transforms": "libero"
}
)"},
      /* pi0.5's openpi configs: pi0's robots, openpi's quantile normalization; pi05_libero's
       * actions are absolute (extra_delta_transform=False) and its model reads no state. */
      {"pi05_droid", R"({
  "name": "pi05_droid",
  "views": {"main": "observation/exterior_image_1_left", "side": "observation/wrist_image_left"},
  "state": ["observation/joint_position", "observation/gripper_position"],
  "state_dim": 8,
  "prompt": "prompt",
  "action_dim": 8,
  "transforms": "droid",
  "norm_mode": "quantile",
  "discrete_state_input": true
}
)"},
      {"pi05_libero", R"({
  "name": "pi05_libero",
  "views": {"main": "observation/image", "side": "observation/wrist_image"},
  "state": ["observation/state"],
  "state_dim": 8,
  "prompt": "prompt",
  "action_dim": 7,
  "transforms": "libero_absolute",
  "norm_mode": "quantile",
  "discrete_state_input": false
}
)"},
      {"aloha_towel", aloha ("aloha_towel", "aloha", "fold the towel")},
      {"aloha_tupperware",
       aloha ("aloha_tupperware", "aloha", "open the tupperware and put the food on the plate")},
      {"aloha_pen_uncap", aloha ("aloha_pen_uncap", "aloha", "uncap the pen")},
      {"aloha_sim", aloha ("aloha_sim", "aloha_sim", "Transfer cube")},
  };
  return kPresets;
}

constexpr int kMaxDepth = 4;
constexpr int kMaxDim = 4096;

bool
fail (std::string *error, const std::string &source, const std::string &what)
{
  if (error)
    *error = source + ": " + what;
  return false;
}

bool
read_path (const json::Value &v, const std::string &field, const std::string &source, KeyPath *out,
           std::string *error)
{
  out->clear ();
  if (v.is_string ()) {
    out->push_back (v.get<std::string> ());
  } else if (v.is_array () && !v.empty ()) {
    for (const auto &e : v) {
      if (!e.is_string ())
        return fail (error, source, field + ": a key path is a string or an array of strings");
      out->push_back (e.get<std::string> ());
    }
  } else {
    return fail (error, source, field + ": a key path is a string or a non-empty array of strings");
  }
  if ((int)out->size () > kMaxDepth)
    return fail (error, source,
                 field + ": key paths are at most " + std::to_string (kMaxDepth) + " deep");
  for (const auto &k : *out)
    if (k.empty ())
      return fail (error, source, field + ": empty key");
  return true;
}

bool
read_int (const json::Value &v, const std::string &field, int lo, int hi, const std::string &source,
          int *out, std::string *error)
{
  if (!v.is_number_integer () || v.get<long long> () < lo || v.get<long long> () > hi)
    return fail (error, source,
                 field + " must be an integer from " + std::to_string (lo) + " to " +
                     std::to_string (hi));
  *out = (int)v.get<long long> ();
  return true;
}

bool
is_prefix (const KeyPath &a, const KeyPath &b)
{
  return a.size () < b.size () && std::equal (a.begin (), a.end (), b.begin ());
}

} // namespace

std::string
key_path_text (const KeyPath &path)
{
  std::string s;
  for (size_t i = 0; i < path.size (); i++)
    s += i == 0 ? path[i] : "[" + path[i] + "]";
  return s;
}

std::vector<std::string>
mapping_presets ()
{
  std::vector<std::string> out;
  for (const auto &p : presets ())
    out.push_back (p.first);
  return out;
}

std::string
mapping_preset_json (const std::string &name)
{
  for (const auto &p : presets ())
    if (name == p.first)
      return p.second;
  return {};
}

std::optional<Mapping>
parse_mapping (const std::string &json_text, const std::string &source, std::string *error)
{
  auto doc = json::parse_strict (json_text, source, error);
  if (!doc)
    return std::nullopt;
  if (!doc->is_object ()) {
    fail (error, source, "a mapping is a JSON object");
    return std::nullopt;
  }
  static const std::set<std::string> known = {
      "name",           "views",     "optional_views",      "state",  "state_dim",
      "prompt",         "seed",      "action_dim",          "ignore", "transforms",
      "default_prompt", "norm_mode", "discrete_state_input"};
  for (auto it = doc->begin (); it != doc->end (); ++it)
    if (!known.count (it.key ())) {
      fail (error, source, "unknown field \"" + it.key () + "\"");
      return std::nullopt;
    }

  Mapping m;
  if (doc->contains ("name")) {
    if (!(*doc)["name"].is_string ()) {
      fail (error, source, "\"name\" must be a string");
      return std::nullopt;
    }
    m.name = (*doc)["name"].get<std::string> ();
  } else {
    m.name = source;
  }

  if (!doc->contains ("views") || !(*doc)["views"].is_object ()) {
    fail (error, source, "\"views\" must be an object: view name -> key path");
    return std::nullopt;
  }
  for (auto it = (*doc)["views"].begin (); it != (*doc)["views"].end (); ++it) {
    auto pos = std::find_if (std::begin (kViewNames), std::end (kViewNames),
                             [&] (const char *n) { return it.key () == n; });
    if (pos == std::end (kViewNames)) {
      fail (error, source,
            "unknown view \"" + it.key () + "\" (views are main, side and top: Pi0's base, " +
                "left wrist and right wrist cameras)");
      return std::nullopt;
    }
    if (!read_path (it.value (), "views." + it.key (), source,
                    &m.views[pos - std::begin (kViewNames)], error))
      return std::nullopt;
  }
  if (m.views[0].empty ()) {
    fail (error, source, "\"views\" must map \"main\" (the base camera)");
    return std::nullopt;
  }
  if (doc->contains ("optional_views")) {
    const auto &ov = (*doc)["optional_views"];
    if (!ov.is_array ()) {
      fail (error, source, "\"optional_views\" must be an array of view names");
      return std::nullopt;
    }
    for (const auto &e : ov) {
      int idx = -1;
      for (int v = 0; v < kNumViews; v++)
        if (e.is_string () && e.get<std::string> () == kViewNames[v])
          idx = v;
      if (idx < 0 || m.views[idx].empty ()) {
        fail (error, source, "\"optional_views\": " + e.dump () + " is not a mapped view");
        return std::nullopt;
      }
      if (idx == 0) {
        fail (error, source, "\"optional_views\": the base view \"main\" is always required");
        return std::nullopt;
      }
      m.optional[idx] = true;
    }
  }

  if (!doc->contains ("state") || !(*doc)["state"].is_array () || (*doc)["state"].empty ()) {
    fail (error, source,
          "\"state\" must be a non-empty array of key paths (concatenated in order)");
    return std::nullopt;
  }
  for (size_t i = 0; i < (*doc)["state"].size (); i++) {
    KeyPath p;
    if (!read_path ((*doc)["state"][i], "state[" + std::to_string (i) + "]", source, &p, error))
      return std::nullopt;
    m.state.push_back (p);
  }
  if (!doc->contains ("state_dim")) {
    fail (error, source, "\"state_dim\" is required (the number of state values a robot sends)");
    return std::nullopt;
  }
  if (!read_int ((*doc)["state_dim"], "\"state_dim\"", 1, kMaxDim, source, &m.state_dim, error))
    return std::nullopt;
  if (doc->contains ("action_dim") &&
      !read_int ((*doc)["action_dim"], "\"action_dim\"", 0, kMaxDim, source, &m.action_dim, error))
    return std::nullopt;
  if (doc->contains ("prompt") && !read_path ((*doc)["prompt"], "prompt", source, &m.prompt, error))
    return std::nullopt;
  if (doc->contains ("seed") && !read_path ((*doc)["seed"], "seed", source, &m.seed, error))
    return std::nullopt;
  if (doc->contains ("transforms")) {
    const auto &t = (*doc)["transforms"];
    std::string names;
    for (const char *n : kTransformNames)
      names += (names.empty () ? "" : ", ") + std::string (n);
    if (!t.is_string () || std::find (std::begin (kTransformNames), std::end (kTransformNames),
                                      t.get<std::string> ()) == std::end (kTransformNames)) {
      fail (error, source,
            "\"transforms\" must be one of " + names + " (the checkpoint's openpi transforms)");
      return std::nullopt;
    }
    m.transforms = t.get<std::string> ();
  }
  if (doc->contains ("norm_mode")) {
    const auto &n = (*doc)["norm_mode"];
    if (!n.is_string () || (n != "zscore" && n != "quantile")) {
      fail (error, source,
            "\"norm_mode\" must be \"zscore\" or \"quantile\" (how the checkpoint's openpi "
            "norm stats are applied)");
      return std::nullopt;
    }
    m.norm_mode = n.get<std::string> ();
  }
  if (doc->contains ("discrete_state_input")) {
    const auto &d = (*doc)["discrete_state_input"];
    if (!d.is_boolean ()) {
      fail (error, source,
            "\"discrete_state_input\" must be true or false (openpi's: does the pi0.5 model "
            "read the state as prompt bins)");
      return std::nullopt;
    }
    m.discrete_state_input = d.get<bool> ();
  }
  if (doc->contains ("default_prompt")) {
    const auto &d = (*doc)["default_prompt"];
    if (!d.is_string () || d.get<std::string> ().empty () ||
        d.get<std::string> ().find ('\0') != std::string::npos) {
      fail (error, source, "\"default_prompt\" must be a non-empty string without NUL");
      return std::nullopt;
    }
    m.default_prompt = d.get<std::string> ();
  }
  if (doc->contains ("ignore")) {
    if (!(*doc)["ignore"].is_array ()) {
      fail (error, source, "\"ignore\" must be an array of key paths");
      return std::nullopt;
    }
    for (size_t i = 0; i < (*doc)["ignore"].size (); i++) {
      KeyPath p;
      if (!read_path ((*doc)["ignore"][i], "ignore[" + std::to_string (i) + "]", source, &p, error))
        return std::nullopt;
      m.ignore.push_back (p);
    }
  }

  /* Every leaf once, and no leaf inside another (a value cannot also be a map of values). */
  std::vector<KeyPath> leaves;
  for (const auto &v : m.views)
    if (!v.empty ())
      leaves.push_back (v);
  for (const auto &p : m.state)
    leaves.push_back (p);
  for (const auto *p : {&m.prompt, &m.seed})
    if (!p->empty ())
      leaves.push_back (*p);
  for (const auto &p : m.ignore)
    leaves.push_back (p);
  for (size_t i = 0; i < leaves.size (); i++)
    for (size_t j = 0; j < leaves.size (); j++) {
      if (i != j && leaves[i] == leaves[j] && i < j) {
        fail (error, source, "the key " + key_path_text (leaves[i]) + " is used twice");
        return std::nullopt;
      }
      if (is_prefix (leaves[i], leaves[j])) {
        fail (error, source,
              "the key " + key_path_text (leaves[i]) + " is used as a value and also holds " +
                  key_path_text (leaves[j]));
        return std::nullopt;
      }
    }
  return m;
}

std::optional<Mapping>
load_mapping (const std::string &name_or_path, std::string *error)
{
  const std::string preset = mapping_preset_json (name_or_path);
  if (!preset.empty ())
    return parse_mapping (preset, "mapping preset '" + name_or_path + "'", error);
  if (name_or_path.find ('/') == std::string::npos &&
      name_or_path.find (".json") == std::string::npos) {
    std::string names;
    for (const auto &n : mapping_presets ())
      names += (names.empty () ? "" : ", ") + n;
    if (error)
      *error =
          "'" + name_or_path + "' is neither a mapping preset (" + names + ") nor a JSON file path";
    return std::nullopt;
  }
  std::string err;
  auto doc = json::load_strict (name_or_path, &err);
  if (!doc) {
    if (error)
      *error = err;
    return std::nullopt;
  }
  return parse_mapping (doc->dump (), name_or_path, error);
}

} // namespace pi0::serve
