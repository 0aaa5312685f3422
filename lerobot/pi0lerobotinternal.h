/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the files of lerobot/ share and its callers never see (lerobot/pi0lerobot.h is the API):
 * the dataset's layout (files numbered in chunks, the statistics' names), the bounds of what a
 * dataset may declare, and the error helper of the common/ convention. */

#include <cstdint>
#include <cstdio>
#include <string>

namespace pi0::lerobot
{

/* Files per chunk directory, as LeRobot's chunks_size (info.json says it too). */
constexpr int64_t kChunksSize = 1000;
/* The per-feature statistics, in the order of the episodes' stats columns. */
constexpr const char *kStatNames[10] = {"min", "max", "mean", "std", "count",
                                        "q01", "q10", "q50",  "q90", "q99"};

/* "chunk-CCC/file-FFF" of file number @idx (chunk = idx / kChunksSize). */
inline std::string
chunk_file (int64_t idx)
{
  char b[64];
  std::snprintf (b, sizeof b, "chunk-%03lld/file-%03lld", (long long)(idx / kChunksSize),
                 (long long)(idx % kChunksSize));
  return b;
}

/* The file number a (chunk, file) pair of meta/episodes names. */
inline int64_t
flat_index (int64_t chunk, int64_t file)
{
  return chunk * kChunksSize + file;
}

inline bool
fail (std::string *error, const std::string &msg)
{
  if (error)
    *error = msg;
  return false;
}

/* Bounds of what a dataset may declare (far beyond any robot's, far below what would exhaust
 * memory): a vector feature's size, a camera's side, fps, episodes and frames. */
constexpr int64_t kMaxDim = 4096;
constexpr int64_t kMaxSide = 16384;
constexpr int64_t kMaxFps = 1000;
constexpr int64_t kMaxCount = (int64_t)1 << 40;

} // namespace pi0::lerobot
