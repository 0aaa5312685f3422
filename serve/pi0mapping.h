/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Which keys of an openpi observation are which camera view, the robot state and the prompt.
 * openpi's robots name their keys differently (ALOHA: `images` → `cam_high`, ..., `state`;
 * DROID: `observation/exterior_image_1_left`, joint and gripper positions; LIBERO:
 * `observation/image`, ...), so the server reads a mapping rather than assuming one robot. The
 * three are presets; any other robot writes a JSON file (docs/serve.md):
 *
 *   {
 *     "name": "aloha",
 *     "views": {"main": ["images", "cam_high"], "side": ["images", "cam_left_wrist"],
 *               "top": ["images", "cam_right_wrist"]},
 *     "optional_views": ["side", "top"],
 *     "state": ["state"],
 *     "state_dim": 14,
 *     "prompt": "prompt",
 *     "action_dim": 14,
 *     "ignore": [["images", "cam_low"]],
 *     "transforms": "aloha"
 *   }
 *
 * A key path is a string (a key of the observation) or an array of strings (nested keys:
 * `["images", "cam_high"]` is observation["images"]["cam_high"]). "state" is an array of key
 * paths whose values are concatenated in order (DROID: joints, then gripper). Keys a request
 * sends that the mapping does not name are refused, unless listed in "ignore".
 *
 * The presets are openpi's inference configs (pi0_aloha, pi0_droid, pi0_libero, pi05_droid,
 * pi05_libero ("norm_mode": "quantile", as openpi normalizes for pi0.5, and openpi's
 * "discrete_state_input", which its converter leaves out of the checkpoint), and the ALOHA
 * checkpoints that differ: pi0_aloha_towel, pi0_aloha_tupperware, pi0_aloha_pen_uncap,
 * pi0_aloha_sim), each with the robot transforms its checkpoint needs ("transforms": the name
 * pi0infer's `transforms` takes, common/pi0transformnames.h) and openpi's default prompt where
 * the config has one ("default_prompt": what a request without a prompt gets; without one such
 * a request is refused, as openpi refuses it).
 *
 * Errors follow common/'s convention: false or an empty optional plus a message. */

#include "common/pi0views.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace pi0::serve
{

/* The views of an observation: pi0::kNumViews and pi0::kViewNames (common/pi0views.h). */

using KeyPath = std::vector<std::string>;

struct Mapping {
  std::string name;
  std::array<KeyPath, kNumViews> views;   /* empty: the view is never sent (always masked) */
  std::array<bool, kNumViews> optional{}; /* may be absent from a request: then masked */
  std::vector<KeyPath> state;             /* concatenated in this order */
  int state_dim = 0;                      /* values the parts add up to */
  KeyPath prompt;                         /* empty: requests carry no prompt */
  KeyPath seed;                           /* empty: requests carry no seed */
  int action_dim = 0;                     /* columns of the chunk sent back (0: all) */
  std::vector<KeyPath> ignore;            /* accepted and dropped */
  std::string transforms = "none";        /* the checkpoint's robot transforms, for pi0infer */
  std::string default_prompt;             /* empty: none (requests must carry a prompt) */
  std::string norm_mode;                  /* "zscore", "quantile"; empty: pi0infer's default */
  /* openpi's discrete_state_input of the training config, which its converter does not write
   * into the checkpoint (pi0infer's discrete-state-input); unset: pi0infer's default. */
  std::optional<bool> discrete_state_input;
};

/* "aloha", "droid", "libero", "pi05_droid", "pi05_libero", then the ALOHA checkpoints that
 * differ: "aloha_towel", "aloha_tupperware", "aloha_pen_uncap", "aloha_sim" (openpi's config
 * names, pi0's without "pi0_"). */
std::vector<std::string> mapping_presets ();

/* The JSON text of a preset (what `pi0-serve --print-mapping NAME` prints), or "". */
std::string mapping_preset_json (const std::string &name);

/* A preset by name, or a JSON file by path (through common/pi0json.h: strict). */
std::optional<Mapping> load_mapping (const std::string &name_or_path, std::string *error);

/* Parses and checks a mapping: known view names, "main" mapped, state_dim given and matching
 * nothing impossible, no key path used twice or both as a value and as a container of others.
 * @source names the text in messages. */
std::optional<Mapping> parse_mapping (const std::string &json_text, const std::string &source,
                                      std::string *error);

/* `images[cam_high]` for ["images", "cam_high"], `prompt` for ["prompt"]. */
std::string key_path_text (const KeyPath &path);

} // namespace pi0::serve
