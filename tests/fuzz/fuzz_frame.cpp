/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer target for the frame parser the robot side runs on untrusted bytes
 * (protocol/pi0frame.cpp). Built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/meson.build and run briefly as a CI test; run it longer by hand:
 *   build/tests/fuzz/fuzz_frame -dict=tests/fuzz/frame.dict -max_total_time=3600
 * Besides "no crash, no out-of-bounds read, no UB", it checks properties: a frame that decodes
 * re-encodes to exactly the same bytes, holds only finite values, and has the size its
 * header announced; a stream reader built on peek_header never runs past the input; and the
 * sender's reader of the robot's stream (FrameStream: reassembly and resynchronisation) only
 * ever hands on frames within its limit and holds no more than its limit plus one push. */

#include "protocol/pi0frame.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace
{

void
check (bool ok)
{
  if (!ok)
    abort ();
}

void
one_frame (const uint8_t *data, size_t size, const std::string &key, const pi0::proto::Limits &lim)
{
  pi0::proto::Header h;
  size_t announced = 0;
  const pi0::proto::Error pe = pi0::proto::peek_header (data, size, lim, &h, &announced);
  pi0::proto::Frame f;
  const pi0::proto::Error e = pi0::proto::decode (data, size, lim, key, &f);
  if (pe != pi0::proto::Error::kOk)
    check (e == pe); /* decode fails the same way when the header is bad */
  if (e != pi0::proto::Error::kOk) {
    check (f.values.empty ());
    return;
  }
  check (announced == size && size <= lim.max_frame_size);
  check (f.values.size () == (size_t)f.header.steps * f.header.dim);
  for (float v : f.values) {
    uint32_t bits;
    memcpy (&bits, &v, 4);
    check ((bits & 0x7F800000u) != 0x7F800000u);
  }
  std::vector<uint8_t> again;
  pi0::proto::encode (f.header, f.values.data (), key, again);
  check (again.size () == size && memcmp (again.data (), data, size) == 0);
  (void)pi0::proto::to_json (f.header, f.values.data (), "fuzz");
}

/* The TCP reader's loop: header first, then wait for the announced size. */
void
as_stream (const uint8_t *data, size_t size, const pi0::proto::Limits &lim)
{
  size_t off = 0;
  for (int guard = 0; guard < 10000 && size - off >= pi0::proto::kHeaderSize; guard++) {
    size_t n = 0;
    if (pi0::proto::peek_header (data + off, size - off, lim, nullptr, &n) !=
        pi0::proto::Error::kOk)
      return;
    check (n >= pi0::proto::kHeaderSize + pi0::proto::kCrcSize);
    if (size - off < n)
      return;
    (void)pi0::proto::decode (data + off, n, lim, "", nullptr);
    off += n;
  }
}

/* The robot's bytes as the sender reads them (FEEDBACK, docs/protocol.md): in pieces whose sizes
 * the input's own bytes choose, so the fuzzer explores every way of cutting a stream. */
void
as_feedback_stream (const uint8_t *data, size_t size)
{
  pi0::proto::FrameStream fs (pi0::proto::kMaxFeedbackFrameSize);
  size_t off = 0;
  while (off < size) {
    const size_t n = std::min<size_t> (size - off, 1 + data[off] % 97);
    fs.push (data + off, n, [] (const uint8_t *f, size_t len) {
      check (len >= pi0::proto::kHeaderSize + pi0::proto::kCrcSize &&
             len <= pi0::proto::kMaxFeedbackFrameSize);
      pi0::proto::Limits lim;
      lim.max_frame_size = pi0::proto::kMaxFeedbackFrameSize;
      (void)pi0::proto::decode (f, len, lim, "", nullptr);
    });
    check (fs.buffered () < pi0::proto::kMaxFeedbackFrameSize);
    off += n;
  }
}

/* Random bytes almost never carry a valid CRC, which would hide everything after the CRC check
 * (HMAC, finiteness, re-encoding) from the fuzzer. Inputs starting with 0xCC get their CRC
 * fixed up (and an HMAC made, for flag bit 0) so those paths are explored too. */
void
with_valid_checksums (const uint8_t *data, size_t size)
{
  std::vector<uint8_t> f (data, data + size);
  pi0::proto::Limits lim;
  lim.max_frame_size = 1 << 20;
  size_t n = 0;
  pi0::proto::Header h;
  if (pi0::proto::peek_header (f.data (), f.size (), lim, &h, &n) != pi0::proto::Error::kOk ||
      n != f.size ())
    return;
  const bool hmac = (h.flags & pi0::proto::kFlagHmac) != 0;
  const size_t crc_off = n - pi0::proto::kCrcSize - (hmac ? pi0::proto::kHmacSize : 0);
  const uint32_t c = pi0::proto::crc32 (f.data (), crc_off);
  for (int i = 0; i < 4; i++)
    f[crc_off + i] = (uint8_t)(c >> (8 * i));
  if (hmac) {
    /* Re-encoding from the parsed header gives the same bytes with a correct trailer; then
     * let the fuzzer's payload bits (possibly NaN) through unchanged. */
    std::vector<float> vals ((size_t)h.steps * h.dim);
    if (!vals.empty ())
      memcpy (vals.data (), f.data () + pi0::proto::kHeaderSize, vals.size () * 4);
    std::vector<uint8_t> g;
    pi0::proto::encode (h, vals.data (), "fuzz key", g);
    if (g.size () == f.size ())
      f = g;
  }
  one_frame (f.data (), f.size (), hmac ? "fuzz key" : "", lim);
}

} // namespace

extern "C" int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (size > 1 && data[0] == 0xCC) {
    with_valid_checksums (data + 1, size - 1);
    return 0;
  }
  pi0::proto::Limits lim;
  lim.max_frame_size = 1 << 20;
  one_frame (data, size, "", lim);
  one_frame (data, size, "fuzz key", lim);
  lim.max_frame_size = 1400;
  lim.max_dim = 32;
  one_frame (data, size, "", lim);
  as_stream (data, size, lim);
  as_feedback_stream (data, size);
  return 0;
}
