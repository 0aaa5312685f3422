/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Checking a camera's MP4 file by its boxes (pi0lerobotmp4.h). */
#include "lerobot/pi0lerobotmp4.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

namespace pi0::lerobot
{

namespace
{

/* The movie box holds tables only (the frames are in mdat): larger than this is not a file
 * LeRobot or pi0lerobotsink made. */
constexpr uint64_t kMaxMoovBytes = 256ull << 20;

uint32_t
be32 (const uint8_t *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t
be64 (const uint8_t *p)
{
  return (uint64_t)be32 (p) << 32 | be32 (p + 4);
}

/* One box inside a buffer: its type and payload. */
struct Box {
  std::string type;
  const uint8_t *data = nullptr;
  size_t size = 0;
};

/* The boxes that fill [@p, @p + @n), or nothing when one overruns it. */
std::optional<std::vector<Box>>
children (const uint8_t *p, size_t n)
{
  std::vector<Box> out;
  size_t at = 0;
  while (at + 8 <= n) {
    uint64_t size = be32 (p + at);
    size_t header = 8;
    if (size == 1) {
      if (at + 16 > n)
        return std::nullopt;
      size = be64 (p + at + 8);
      header = 16;
    } else if (size == 0) {
      size = n - at;
    }
    if (size < header || size > n - at)
      return std::nullopt;
    out.push_back ({std::string ((const char *)p + at + 4, 4), p + at + header, size - header});
    at += size;
  }
  if (at != n)
    return std::nullopt;
  return out;
}

const Box *
find (const std::vector<Box> &boxes, const char *type)
{
  for (const Box &b : boxes)
    if (b.type == type)
      return &b;
  return nullptr;
}

/* The first video track's sample entry in a moov payload. */
bool
video_entry (const uint8_t *moov, size_t n, Mp4Video *out, std::string *why)
{
  auto top = children (moov, n);
  if (!top) {
    *why = "its moov box is damaged";
    return false;
  }
  for (const Box &trak : *top) {
    if (trak.type != "trak")
      continue;
    auto t = children (trak.data, trak.size);
    const Box *mdia = t ? find (*t, "mdia") : nullptr;
    auto m = mdia ? children (mdia->data, mdia->size) : std::nullopt;
    const Box *hdlr = m ? find (*m, "hdlr") : nullptr;
    /* hdlr: version and flags (4), pre_defined (4), handler_type (4). */
    if (!hdlr || hdlr->size < 12 || std::memcmp (hdlr->data + 8, "vide", 4) != 0)
      continue;
    const Box *minf = find (*m, "minf");
    auto mi = minf ? children (minf->data, minf->size) : std::nullopt;
    const Box *stbl = mi ? find (*mi, "stbl") : nullptr;
    auto st = stbl ? children (stbl->data, stbl->size) : std::nullopt;
    const Box *stsd = st ? find (*st, "stsd") : nullptr;
    /* stsd: version and flags (4), entry_count (4), then the first entry: size (4), type (4),
     * reserved (6), data_reference_index (2), pre_defined and reserved (16), width (2), height
     * (2). */
    if (!stsd || stsd->size < 8 + 36 || be32 (stsd->data + 4) < 1) {
      *why = "its video track has no sample description";
      return false;
    }
    const uint8_t *e = stsd->data + 8;
    out->sample_entry.assign ((const char *)e + 4, 4);
    out->width = (e[32] << 8) | e[33];
    out->height = (e[34] << 8) | e[35];
    return true;
  }
  *why = "it has no video track";
  return false;
}

} // namespace

bool
probe_mp4 (const std::string &path, Mp4Video *out, std::string *error)
{
  auto fail = [&] (const std::string &why) {
    *error = path + ": " + why;
    return false;
  };
  struct stat sb;
  if (::stat (path.c_str (), &sb) != 0)
    return fail ("no such file");
  if (!S_ISREG (sb.st_mode))
    return fail ("not a regular file");
  if (sb.st_size == 0)
    return fail ("an empty file");
  std::ifstream in (path, std::ios::binary);
  if (!in)
    return fail ("cannot be opened");
  const uint64_t file_size = (uint64_t)sb.st_size;
  uint64_t at = 0;
  bool first = true, have_moov = false;
  while (at < file_size) {
    uint8_t h[16];
    if (file_size - at < 8)
      return fail ("truncated: " + std::to_string (file_size - at) + " stray bytes at its end");
    in.seekg ((std::streamoff)at);
    in.read ((char *)h, 8);
    if (!in)
      return fail ("cannot be read");
    uint64_t size = be32 (h);
    size_t header = 8;
    const std::string type ((const char *)h + 4, 4);
    if (first && type != "ftyp")
      return fail ("not an MP4 file (it does not start with an ftyp box)");
    first = false;
    if (size == 1) {
      if (file_size - at < 16)
        return fail ("truncated in the " + type + " box's header");
      in.read ((char *)h + 8, 8);
      size = be64 (h + 8);
      header = 16;
    } else if (size == 0) {
      size = file_size - at; /* to the end of the file */
    }
    if (size < header)
      return fail ("damaged: the " + type + " box has a size of " + std::to_string (size));
    if (size > file_size - at)
      return fail ("truncated: the " + type + " box needs " + std::to_string (size) +
                   " bytes, the file has " + std::to_string (file_size - at) + " from it");
    if (type == "moov" && !have_moov) {
      if (size - header > kMaxMoovBytes)
        return fail ("its moov box is larger than " + std::to_string (kMaxMoovBytes >> 20) +
                     " MiB");
      std::vector<uint8_t> moov (size - header);
      in.seekg ((std::streamoff) (at + header));
      in.read ((char *)moov.data (), (std::streamsize)moov.size ());
      if (!in)
        return fail ("cannot be read");
      std::string why;
      if (!video_entry (moov.data (), moov.size (), out, &why))
        return fail (why);
      have_moov = true;
    }
    at += size;
  }
  if (!have_moov)
    return fail ("no moov box (an MP4 whose writer did not finish it)");
  return true;
}

bool
codec_matches (const std::string &codec, const std::string &entry)
{
  if (codec == "h264")
    return entry == "avc1" || entry == "avc3";
  if (codec == "av1")
    return entry == "av01";
  if (codec == "hevc")
    return entry == "hvc1" || entry == "hev1";
  if (codec == "vp9")
    return entry == "vp09";
  return true;
}

} // namespace pi0::lerobot
