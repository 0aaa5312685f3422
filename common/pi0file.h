/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The project's one way to read a small file whole (robot configurations, config.json,
 * norm_stats.json, LeRobot's metadata, key files). A configuration path may name anything:
 * /dev/zero reads forever, a FIFO with no writer blocks open() forever, a directory or a
 * 40 GB file is no configuration. So: only a regular file is read, never more than @max_bytes,
 * opened without blocking, and every failure is a message naming the path and the real
 * reason (errno's text taken where the call failed).
 *
 * Returns false with *@error = "<path>: <why>" on failure. No GLib, no GStreamer. */

#include <cstddef>
#include <string>

namespace pi0
{

/* The cap configuration readers use unless they know better: 64 MiB. */
constexpr size_t kMaxConfigFileBytes = size_t (64) << 20;

bool read_regular_file (const std::string &path, size_t max_bytes, std::string *out,
                        std::string *error);

/* The check alone, for paths handed to a library that opens them itself (a tokenizer model,
 * a TorchScript file): true if @path is a regular file; otherwise *@error says what it is. */
bool is_regular_file (const std::string &path, std::string *error);

/* Whether anything is at @path (stat succeeds), and whether it is a directory. */
bool path_exists (const std::string &path);
bool is_directory (const std::string &path);

/* The directory part of @path: "." for a bare name, "/" for a file in the root. */
std::string parent_dir (const std::string &path);

} // namespace pi0
