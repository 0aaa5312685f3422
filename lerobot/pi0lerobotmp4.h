/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A camera's MP4 file checked before anything decodes it: its boxes (ISO/IEC 14496-12) read
 * without decoding, so that an empty, truncated or foreign file is refused at once with its
 * name, rather than found by a decoder on its own threads while a pipeline is still starting
 * (where gst-launch-1.0 could hang on it). */
#pragma once

#include <string>

namespace pi0::lerobot
{

/* The first video track of an MP4 file. */
struct Mp4Video {
  std::string sample_entry; /* its sample entry's type: "avc1", "av01", "hvc1", ... */
  int width = 0, height = 0;
};

/* Reads @path's top-level boxes (an ftyp first, a moov, every box within the file's size) and
 * the first video track's sample entry. False with *@error ("<path>: <why>") for a missing,
 * empty, truncated or non-MP4 file, or one without a video track. */
bool probe_mp4 (const std::string &path, Mp4Video *out, std::string *error);

/* Whether an MP4 sample entry type holds FFmpeg's codec @codec, as info.json names it ("h264":
 * avc1 or avc3, "av1": av01, "hevc": hvc1 or hev1, "vp9": vp09). A codec this does not know
 * matches any entry. */
bool codec_matches (const std::string &codec, const std::string &sample_entry);

} // namespace pi0::lerobot
