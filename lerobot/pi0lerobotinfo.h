/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* meta/info.json's features, both ways: the features a Schema writes (and the `huggingface`
 * metadata of the data files, which repeats them as the `datasets` library's Features), the
 * statistics as stats.json holds them, and a Schema read back from a dataset someone gave us,
 * every number checked against the bounds in pi0lerobotinternal.h. */

#include "common/pi0json.h"
#include "lerobot/pi0lerobot.h"

#include <arrow/util/key_value_metadata.h>

#include <memory>
#include <string>
#include <vector>

namespace pi0::lerobot
{

/* Written in the order LeRobot writes keys. */
using OJson = nlohmann::ordered_json;

/* info.json's "features" of @s. */
OJson features_json (const Schema &s);
/* The feature keys in file order: what stats and episode rows iterate over. */
std::vector<std::string> feature_keys (const Schema &s);
/* One feature's statistics as stats.json holds them (images per channel, as [c][1][1]). */
OJson stats_json (const Stats &s, bool image);
/* Statistic @i of kStatNames (not 4, the count). */
const std::vector<double> &stat_field (const Stats &s, int i);
std::vector<double> &stat_field (Stats &s, int i);
/* The schema metadata the `datasets` library writes: its Features, which the loader would
 * otherwise infer. */
std::shared_ptr<arrow::KeyValueMetadata> hf_metadata (const Schema &s);

/* A whole number in [lo, hi] at @v (an integer, or a float with no fraction), or false with a
 * message naming @what: hostile files give messages, never exceptions or huge allocations. */
bool whole_number (const pi0::json::Value &v, int64_t lo, int64_t hi, const std::string &what,
                   int64_t *out, std::string *error);
/* The Schema info.json declares (fps, robot type, state, action and cameras), or false with a
 * message. */
bool parse_features (const pi0::json::Value &info, Schema *s, std::string *error);

} // namespace pi0::lerobot
