/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Encoder and decoder of the pi0 action frame. The decoder is the robot's first line of
 * defence: it is fuzzed (tests/fuzz), checks every field against fixed bounds before trusting
 * it, computes sizes in size_t from 16-bit fields (so no product can overflow), and touches
 * no byte outside [data, data+len). */

#include "protocol/pi0frame.h"

#include <glib.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace pi0::proto
{

namespace
{

/* Byte offsets of the v1 header (docs/protocol.md, "Header"). */
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffKind = 6, kOffFlags = 7, kOffSession = 8,
                 kOffSeq = 16, kOffChunk = 24, kOffObs = 32, kOffSend = 40, kOffPeriod = 48,
                 kOffStepIndex = 56, kOffChunkSteps = 60, kOffSteps = 64, kOffDim = 66,
                 kOffReserved = 68;
static_assert (kOffReserved + 4 == kHeaderSize, "header layout");

void
put16 (uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
void
put32 (uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
void
put64 (uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
uint16_t
get16 (const uint8_t *p)
{
  return (uint16_t)(p[0] | (p[1] << 8));
}
uint32_t
get32 (const uint8_t *p)
{
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
uint64_t
get64 (const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

struct CrcTable {
  uint32_t t[256];
  CrcTable ()
  {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
  }
};
const CrcTable crc_table;

/* Exponent bits all ones = NaN or ±Inf. Read from the bits so the check cannot be optimised
 * away by -ffinite-math-only in whatever program includes this library. */
bool
bits_finite (uint32_t bits)
{
  return (bits & 0x7F800000u) != 0x7F800000u;
}

void
hmac_sha256 (const std::string &key, const uint8_t *data, size_t len, uint8_t out[kHmacSize])
{
  GHmac *h = g_hmac_new (G_CHECKSUM_SHA256, (const guchar *)key.data (), key.size ());
  g_hmac_update (h, data, (gssize)len);
  gsize out_len = kHmacSize;
  g_hmac_get_digest (h, out, &out_len);
  g_hmac_unref (h);
}

bool
kind_valid (uint8_t k)
{
  return k >= (uint8_t)Kind::kAction && k <= (uint8_t)Kind::kFeedback;
}

} // namespace

const char *
error_name (Error e)
{
  switch (e) {
    case Error::kOk:
      return "ok";
    case Error::kTruncated:
      return "truncated";
    case Error::kTrailing:
      return "trailing-bytes";
    case Error::kBadMagic:
      return "bad-magic";
    case Error::kBadVersion:
      return "bad-version";
    case Error::kBadKind:
      return "bad-kind";
    case Error::kBadFlags:
      return "bad-flags";
    case Error::kBadReserved:
      return "bad-reserved";
    case Error::kBadDims:
      return "bad-dims";
    case Error::kBadStepRange:
      return "bad-step-range";
    case Error::kTooLarge:
      return "too-large";
    case Error::kBadCrc:
      return "bad-crc";
    case Error::kHmacMissing:
      return "hmac-missing";
    case Error::kHmacUnexpected:
      return "hmac-unexpected";
    case Error::kBadHmac:
      return "bad-hmac";
    case Error::kNonFinite:
      return "non-finite";
  }
  return "unknown";
}

const char *
kind_name (Kind k)
{
  switch (k) {
    case Kind::kAction:
      return "action";
    case Kind::kHold:
      return "hold";
    case Kind::kStop:
      return "stop";
    case Kind::kHello:
      return "hello";
    case Kind::kFeedback:
      return "feedback";
  }
  return "unknown";
}

uint32_t
crc32 (const uint8_t *data, size_t len, uint32_t crc)
{
  crc = ~crc;
  for (size_t i = 0; i < len; i++)
    crc = crc_table.t[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

size_t
frame_size (uint32_t steps, uint32_t dim, bool hmac)
{
  return kHeaderSize + (size_t)steps * dim * 4 + kCrcSize + (hmac ? kHmacSize : 0);
}

void
encode (const Header &h, const float *values, const std::string &key, std::vector<uint8_t> &out)
{
  const bool hmac = !key.empty ();
  const size_t n = (size_t)h.steps * h.dim;
  const size_t start = out.size ();
  out.resize (start + frame_size (h.steps, h.dim, hmac));
  uint8_t *p = out.data () + start;

  uint8_t flags = (uint8_t)(h.flags & ~kFlagHmac);
  if (hmac)
    flags |= kFlagHmac;
  put32 (p + kOffMagic, kMagic);
  put16 (p + kOffVersion, kVersion);
  p[kOffKind] = (uint8_t)h.kind;
  p[kOffFlags] = flags;
  put64 (p + kOffSession, h.session_id);
  put64 (p + kOffSeq, h.seq);
  put64 (p + kOffChunk, h.chunk_id);
  put64 (p + kOffObs, h.observation_time_ns);
  put64 (p + kOffSend, h.send_time_ns);
  put64 (p + kOffPeriod, h.step_period_ns);
  put32 (p + kOffStepIndex, h.step_index);
  put32 (p + kOffChunkSteps, h.chunk_steps);
  put16 (p + kOffSteps, h.steps);
  put16 (p + kOffDim, h.dim);
  put32 (p + kOffReserved, 0);
  uint8_t *q = p + kHeaderSize;
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy (&bits, &values[i], 4);
    put32 (q + 4 * i, bits);
  }
  q += 4 * n;
  put32 (q, crc32 (p, (size_t)(q - p)));
  q += kCrcSize;
  if (hmac)
    hmac_sha256 (key, p, (size_t)(q - p), q);
}

Error
peek_header (const uint8_t *p, size_t len, const Limits &limits, Header *h, size_t *size)
{
  if (len < kHeaderSize)
    return Error::kTruncated;
  if (get32 (p + kOffMagic) != kMagic)
    return Error::kBadMagic;
  if (get16 (p + kOffVersion) != kVersion)
    return Error::kBadVersion;
  if (!kind_valid (p[kOffKind]))
    return Error::kBadKind;
  if (p[kOffFlags] & ~kKnownFlags)
    return Error::kBadFlags;
  /* A FEEDBACK is no part of a chunk nor of a stream: only the HMAC flag has a meaning. */
  if (p[kOffKind] == (uint8_t)Kind::kFeedback && (p[kOffFlags] & ~kFlagHmac))
    return Error::kBadFlags;
  if (get32 (p + kOffReserved) != 0)
    return Error::kBadReserved;

  Header hd;
  hd.kind = (Kind)p[kOffKind];
  hd.flags = p[kOffFlags];
  hd.session_id = get64 (p + kOffSession);
  hd.seq = get64 (p + kOffSeq);
  hd.chunk_id = get64 (p + kOffChunk);
  hd.observation_time_ns = get64 (p + kOffObs);
  hd.send_time_ns = get64 (p + kOffSend);
  hd.step_period_ns = get64 (p + kOffPeriod);
  hd.step_index = get32 (p + kOffStepIndex);
  hd.chunk_steps = get32 (p + kOffChunkSteps);
  hd.steps = get16 (p + kOffSteps);
  hd.dim = get16 (p + kOffDim);

  const uint32_t max_dim = limits.max_dim < kMaxDim ? limits.max_dim : kMaxDim;
  const uint32_t max_steps = limits.max_steps < kMaxSteps ? limits.max_steps : kMaxSteps;
  if (hd.dim > max_dim || hd.steps > max_steps || hd.chunk_steps > max_steps)
    return Error::kBadDims;
  switch (hd.kind) {
    case Kind::kAction:
      if (hd.steps == 0 || hd.dim == 0 || hd.chunk_steps == 0)
        return Error::kBadDims;
      /* 64-bit sum: both terms are < 2^32. */
      if ((uint64_t)hd.step_index + hd.steps > hd.chunk_steps)
        return Error::kBadStepRange;
      break;
    case Kind::kHold:
      if (hd.steps > 1 || (hd.steps == 1 && hd.dim == 0))
        return Error::kBadDims;
      if (hd.step_index != 0 || hd.chunk_steps != hd.steps)
        return Error::kBadStepRange;
      break;
    case Kind::kFeedback: /* step_index is the row executing; no payload */
      if (hd.steps != 0 || hd.dim != 0)
        return Error::kBadDims;
      if (hd.chunk_steps != 0)
        return Error::kBadStepRange;
      break;
    case Kind::kStop:
    case Kind::kHello:
      if (hd.steps != 0 || (hd.kind == Kind::kHello && hd.dim == 0))
        return Error::kBadDims;
      if (hd.step_index != 0 || hd.chunk_steps != 0)
        return Error::kBadStepRange;
      break;
  }

  /* steps and dim are bounded above, so this cannot overflow. */
  const size_t total = frame_size (hd.steps, hd.dim, (hd.flags & kFlagHmac) != 0);
  const size_t max_size =
      limits.max_frame_size < kMaxFrameSize ? limits.max_frame_size : kMaxFrameSize;
  if (total > max_size)
    return Error::kTooLarge;
  if (h)
    *h = hd;
  if (size)
    *size = total;
  return Error::kOk;
}

Error
decode (const uint8_t *p, size_t len, const Limits &limits, const std::string &key, Frame *frame)
{
  Header hd;
  size_t total = 0;
  Error e = peek_header (p, len, limits, &hd, &total);
  if (e != Error::kOk)
    return e;
  if (len < total)
    return Error::kTruncated;
  if (len > total)
    return Error::kTrailing;

  const bool has_hmac = (hd.flags & kFlagHmac) != 0;
  const size_t n = (size_t)hd.steps * hd.dim;
  const size_t crc_off = kHeaderSize + 4 * n;
  if (get32 (p + crc_off) != crc32 (p, crc_off))
    return Error::kBadCrc;
  if (!key.empty () && !has_hmac)
    return Error::kHmacMissing;
  if (key.empty () && has_hmac)
    return Error::kHmacUnexpected;
  if (has_hmac) {
    uint8_t mac[kHmacSize];
    hmac_sha256 (key, p, crc_off + kCrcSize, mac);
    /* Constant time: do not tell an attacker how many leading bytes were right. */
    uint8_t diff = 0;
    for (size_t i = 0; i < kHmacSize; i++)
      diff |= (uint8_t)(mac[i] ^ p[crc_off + kCrcSize + i]);
    if (diff != 0)
      return Error::kBadHmac;
  }
  for (size_t i = 0; i < n; i++) {
    if (!bits_finite (get32 (p + kHeaderSize + 4 * i)))
      return Error::kNonFinite;
  }
  if (frame) {
    frame->header = hd;
    frame->values.resize (n);
    for (size_t i = 0; i < n; i++) {
      uint32_t bits = get32 (p + kHeaderSize + 4 * i);
      memcpy (&frame->values[i], &bits, 4);
    }
  }
  return Error::kOk;
}

uint32_t
rows_per_frame (uint32_t dim, bool hmac, size_t max_frame_size)
{
  const size_t fixed = frame_size (0, 0, hmac);
  if (dim == 0 || max_frame_size <= fixed)
    return 0;
  size_t rows = (max_frame_size - fixed) / ((size_t)dim * 4);
  if (rows > 0xFFFF)
    rows = 0xFFFF;
  return (uint32_t)rows;
}

bool
FrameStream::next (size_t &off, size_t *size)
{
  static const uint8_t magic[4] = {(uint8_t)kMagic, (uint8_t)(kMagic >> 8), (uint8_t)(kMagic >> 16),
                                   (uint8_t)(kMagic >> 24)};
  Limits lim;
  lim.max_frame_size = max_frame_;
  /* Skips to the next magic after @from, or keeps only a tail that may begin one. One run of
   * skipped bytes counts once, however many pushes it spans. */
  auto skip_from = [&] (size_t from) {
    resyncs_ += !skipping_;
    skipping_ = true;
    const uint8_t *b = buf_.data (), *e = b + buf_.size ();
    const uint8_t *m = std::search (b + from, e, magic, magic + 4);
    off = m != e ? (size_t)(m - b)
                 : std::max (from, buf_.size () - std::min<size_t> (3, buf_.size ()));
  };
  bool ok = false;
  for (;;) {
    const size_t avail = buf_.size () - off;
    if (avail < 4)
      break;
    if (memcmp (buf_.data () + off, magic, 4) != 0) {
      skip_from (off + 1);
      continue;
    }
    if (avail < kHeaderSize)
      break;
    if (peek_header (buf_.data () + off, avail, lim, nullptr, size) != Error::kOk) {
      skip_from (off + 1); /* not a frame after all: look for the next magic */
      continue;
    }
    ok = avail >= *size; /* a frame, whole or still arriving */
    skipping_ = false;
    break;
  }
  return ok;
}

std::string
to_json (const Header &h, const float *values, const std::string &model_id)
{
  std::string s;
  char buf[128];
  auto time_field = [&] (const char *name, uint64_t t) {
    if (t == kTimeNone)
      snprintf (buf, sizeof buf, ",\"%s\":null", name);
    else
      snprintf (buf, sizeof buf, ",\"%s\":%" PRIu64, name, t);
    s += buf;
  };
  snprintf (buf, sizeof buf, "{\"v\":%u,\"kind\":\"%s\",\"session\":\"%016" PRIx64 "\"", kVersion,
            kind_name (h.kind), h.session_id);
  s += buf;
  snprintf (buf, sizeof buf, ",\"seq\":%" PRIu64 ",\"chunk_id\":%" PRIu64, h.seq, h.chunk_id);
  s += buf;
  time_field ("observation_time_ns", h.observation_time_ns);
  time_field ("send_time_ns", h.send_time_ns);
  snprintf (buf, sizeof buf,
            ",\"step_period_ns\":%" PRIu64 ",\"step_index\":%u,\"chunk_steps\":%u,\"steps\":%u,"
            "\"dim\":%u",
            h.step_period_ns, h.step_index, h.chunk_steps, (unsigned)h.steps, (unsigned)h.dim);
  s += buf;
  s += ",\"last\":";
  s += (h.flags & kFlagLast) ? "true" : "false";
  s += ",\"clamped\":";
  s += (h.flags & kFlagClamped) ? "true" : "false";
  /* model_id comes from upstream: escape it rather than trust it. */
  s += ",\"model_id\":\"";
  const bool utf8 = g_utf8_validate (model_id.data (), (gssize)model_id.size (), nullptr);
  for (unsigned char c : model_id) {
    if (c >= 0x80 && !utf8) {
      s += '?';
      continue;
    }
    if (c == '"' || c == '\\') {
      s += '\\';
      s += (char)c;
    } else if (c < 0x20) {
      snprintf (buf, sizeof buf, "\\u%04x", c);
      s += buf;
    } else {
      s += (char)c;
    }
  }
  s += "\",\"values\":[";
  for (uint32_t r = 0; r < h.steps; r++) {
    s += r ? ",[" : "[";
    for (uint32_t c = 0; c < h.dim; c++) {
      const float v = values[(size_t)r * h.dim + c];
      uint32_t bits;
      memcpy (&bits, &v, 4);
      if (!bits_finite (bits))
        snprintf (buf, sizeof buf, "%snull", c ? "," : "");
      else
        snprintf (buf, sizeof buf, "%s%.9g", c ? "," : "", (double)v);
      s += buf;
    }
    s += "]";
  }
  s += "]}";
  return s;
}

} // namespace pi0::proto
