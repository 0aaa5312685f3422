/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The project's one way to read JSON (robot configurations, model configs, norm stats,
 * safetensors headers): nlohmann-json, parsed strictly. Configuration files decide what a
 * robot may do, so an ambiguous file is refused rather than read one way: a key given twice in
 * one object is an error naming the key and where it is (nlohmann alone keeps the last).
 *
 * Errors follow the convention of the layer that calls: these functions return false (or an
 * empty optional) with a message; inference/ turns it into a pi0::Error, protocol/ returns it
 * to its own caller. No GLib, no GStreamer. */

#include "common/pi0file.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace pi0::json
{

using Value = nlohmann::json;
/* For what the project writes: keys in the order they were set (nlohmann::json sorts them). */
using OrderedValue = nlohmann::ordered_json;

/* The deepest nesting of arrays and objects a file may have. The project's files need five
 * levels (LeRobot's image statistics); a deeper file is refused before it is parsed. */
constexpr size_t kMaxNesting = 64;

/* Parses @text. On failure returns nothing and sets *@error to "<source>: <what>", e.g.
 * "robot.json: the same object has the key 'max_step' more than once (at /limits)". */
std::optional<Value> parse_strict (const std::string &text, const std::string &source,
                                   std::string *error);

/* As parse_strict(), keeping the objects' keys in the order the text gives them (for what is
 * passed on, such as a metadata file sent to clients as it was written). */
std::optional<OrderedValue> parse_strict_ordered (const std::string &text,
                                                  const std::string &source, std::string *error);

/* Reads (pi0::read_regular_file: a regular file of at most @max_bytes, never blocking on a
 * FIFO) and parses a file; a missing, unreadable or oversized file is an error naming it. */
std::optional<Value> load_strict (const std::string &path, std::string *error,
                                  size_t max_bytes = kMaxConfigFileBytes);

/* One number as a float32: it must be a JSON number, finite and within float32's range (1e39
 * would become infinity). On failure *@error says why, prefixed with @what. */
bool to_float (const Value &v, const std::string &what, float *out, std::string *error);

/* An array of numbers as float32, each checked as by to_float(). @what names the field in the
 * message ("\"upper\"[3] ..."). */
bool to_float_array (const Value &v, const std::string &what, std::vector<float> *out,
                     std::string *error);

} // namespace pi0::json
