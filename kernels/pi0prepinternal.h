/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Internal to kernels/: what the CPU path's files share with each other (YUV rows, the filter
 * passes and their plans, the pixel layouts). Not part of the API: callers include
 * kernels/pi0prep.h. Per-row functions only; what runs per pixel stays inline in the file that
 * loops over the pixels, so splitting the path into files costs no inlining. */

#include "kernels/pi0prep.h"

#include <cstddef>
#include <cstdint>
#include <vector>

/* Loops the compiler vectorizes get an AVX2 clone chosen at load time (GCC's ifunc); the
 * library is built for baseline x86-64, so without it they would be SSE2 only. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define PI0_MULTIVERSION __attribute__ ((target_clones ("avx2", "default")))
#else
#define PI0_MULTIVERSION
#endif

namespace pi0::prep
{

/* A filtered sum with @bits fractional bits (the rounding half included) to 0..255, as PIL's
 * clip8. */
inline uint8_t
clip8 (int32_t ss, int bits)
{
  if (ss >= (1 << bits << 8))
    return 255;
  if (ss <= 0)
    return 0;
  return static_cast<uint8_t> (ss >> bits);
}

/* ---- pixel layouts (pi0prepformats.cpp) ---- */

/* Byte offsets of R, G, B inside a packed pixel. */
void rgb_offsets (Format f, int off[3]);

/* ---- YUV rows to RGB (pi0prepyuv.cpp) ---- */

/* One row of YUV converted to packed RGB (filter=pil; scalar, like the rest of that path). */
void yuv_row_to_rgb (const Image &img, int y, uint8_t *dst);
/* One row of YUV converted to three planar rows (R, G, B), same arithmetic as above. */
void yuv_row_to_planar (const Image &img, int y, uint8_t *R, uint8_t *G, uint8_t *B);

/* ---- filter=pil: horizontal pass first, 32-bit weights (pi0preppasses.cpp) ---- */

/* Horizontal pass weights laid out per output column over the bytes of B-byte pixels, padded
 * to a multiple of the accumulator block so the inner loop has a fixed length and vectorizes. */
struct HPlan {
  int bpp = 3, block = 24, len = 0, bits = kPrecisionBits;
  std::vector<int> start; /* first byte read, per output column */
  std::vector<int32_t> w; /* len weights per column */
  bool fits = true;       /* every column's window lies inside the row */
};

HPlan make_hplan (const AxisWeights &a, int bpp, int row_bytes);

/* One input row -> three uint8 planes' rows (R, G, B) of the intermediate image: 3-byte,
 * 4-byte and 1-byte pixels. */
void hpass_row_3 (const uint8_t *row, const HPlan &h, int n_out, const int off[3], uint8_t *r,
                  uint8_t *g, uint8_t *b);
void hpass_row_4 (const uint8_t *row, const HPlan &h, int n_out, const int off[3], uint8_t *r,
                  uint8_t *g, uint8_t *b);
void hpass_row_1 (const uint8_t *row, const HPlan &h, int n_out, uint8_t *r);
/* Plain per-tap loop: rows too narrow for the padded window (tiny images). */
void hpass_row_scalar (const uint8_t *row, const AxisWeights &a, int bpp, const int off[3],
                       uint8_t *r, uint8_t *g, uint8_t *b);
/* One output row of one plane from @count rows of the intermediate image. */
void vpass_row (const uint8_t *tmp, size_t tmp_stride, int n, const int32_t *w, int count,
                uint8_t *out, int bits);

/* ---- filter=antialias: vertical pass first, 16-bit weights (pi0preppasses.cpp) ---- */

/* out[i] = clip (sum_k w[k] * rows[k][i]) for i < len; w has kFastBits fractional bits. */
void vsum (const uint8_t *const *rows, const int16_t *w, int n, int len, uint8_t *out, int bits);
/* acc[i] += sum_k w[k] * rows[k][i] for i < len: the vertical pass of a filter too long for
 * vsum (more than kFastMaxTaps taps, 32-bit weights), a group of rows at a time. */
void vacc32 (const uint8_t *const *rows, const int32_t *w, int n, int len, int32_t *__restrict acc);

/* filter=antialias horizontal pass on one plane: int16 weights, windows padded to 16 taps. */
struct HPlan16 {
  int len = 16;
  std::vector<int> start;
  std::vector<int16_t> w;
  bool fits = true;
};

HPlan16 make_hplan16 (const AxisWeights &a, int row_len);
void hpass16 (const uint8_t *row, const HPlan16 &h, int n_out, uint8_t *out, int bits);

/* Byte planes of packed 3- or 4-byte pixels: plane o holds byte o of every pixel in [x0, x1). */
void byte_planes (const uint8_t *s, int bpp, int x0, int x1, uint8_t *const *P);

} // namespace pi0::prep
