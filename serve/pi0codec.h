/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* openpi's messages in msgpack (msgpack-c++), without I/O: an observation in, an action chunk,
 * the connect-time metadata and errors out.
 *
 * openpi-client packs numpy arrays as maps {b"__ndarray__": True, b"data": <bytes>,
 * b"dtype": "<f4", b"shape": [...]} and numpy scalars as {b"__npgeneric__": True, b"data": x,
 * b"dtype": ...} (openpi_client/msgpack_numpy.py). Only numeric dtypes are accepted here (a
 * whitelist: bool, int8..int64, uint8..uint64, float16/32/64, little-endian); there is no
 * object, pickle or extension type anywhere, and msgpack's own limits bound nesting and counts
 * before anything is allocated.
 *
 * Errors: false plus a message written for the client (it is sent back as openpi's server sends
 * its traceback), naming the key and what was expected. */

#include "serve/pi0mapping.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pi0::serve
{

struct DecodeLimits {
  size_t max_message = 16u << 20; /* bytes of one message (the server refuses bigger first) */
  int max_image_side = 8192;      /* pixels, per side */
  size_t max_prompt = 16 * 1024;  /* bytes */
};

/* One camera view: uint8 RGB, HWC ([H,W,3]) or CHW ([3,H,W]; openpi's rule: a first dimension
 * of 3 means channels first). The pixels point into the decoded message, or, for a float image
 * (float32/float64 in [0, 1], which openpi's policies convert as (255 * image).astype(uint8)),
 * into `owned`, which holds that conversion. */
struct ImageView {
  bool present = false;
  const uint8_t *data = nullptr;
  std::shared_ptr<std::vector<uint8_t>> owned;
  int width = 0, height = 0;
  bool chw = false;
  size_t size () const { return (size_t)width * height * 3; }
};

struct Observation {
  std::array<ImageView, kNumViews> views;
  std::vector<float> state;          /* finite float32, mapping.state_dim values */
  std::optional<std::string> prompt; /* UTF-8 */
  std::optional<uint64_t> seed;
};

/* Decodes @data (one websocket message) with @mapping. The image pointers refer into @data:
 * keep it alive while they are used. */
bool decode_observation (const uint8_t *data, size_t size, const Mapping &mapping,
                         const DecodeLimits &limits, Observation *out, std::string *error);

/* What the server adds to a chunk, as openpi's server does (`server_timing`) and openpi's
 * Policy.infer (`policy_timing`). Negative: left out. */
struct Timing {
  double server_infer_ms = -1; /* request received -> chunk ready */
  double prev_total_ms = -1;   /* the previous request's whole cycle */
  double policy_infer_ms = -1; /* the model's forward pass */
};

/* {"actions": float32 ndarray [horizon, dim], "policy_timing": {...}, "server_timing": {...}}.
 * @actions holds horizon rows of @stride floats; the first @dim of each are sent. */
std::string encode_actions (const float *actions, int horizon, int dim, int stride,
                            const Timing &timing);

/* A JSON object (the server's metadata) as a msgpack map, as openpi sends its policy metadata on
 * connect. Arrays of numbers stay lists (msgpack arrays). False when @json_text is not an
 * object. */
bool encode_metadata (const std::string &json_text, std::string *out, std::string *error);

/* Reads back what encode_actions wrote (for tests and tools): the actions as [horizon][dim]. */
bool decode_actions (const uint8_t *data, size_t size, int *horizon, int *dim,
                     std::vector<float> *values, Timing *timing, std::string *error);

} // namespace pi0::serve
