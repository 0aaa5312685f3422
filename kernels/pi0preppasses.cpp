/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The filter passes of the CPU path, a row at a time: filter=pil's horizontal-then-vertical
 * passes with 22-bit weights, filter=antialias's vertical-then-horizontal passes with 14-bit
 * (int16) weights. The library is built for baseline x86-64, so a hot loop is either AVX2
 * intrinsics picked at run time where the CPU has AVX2, next to a portable loop with the same
 * integer result, or a plain loop that PI0_MULTIVERSION compiles for both. */

#include "kernels/pi0prep.h"
#include "kernels/pi0prepinternal.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pi0::prep
{

/* ---- filter=pil: horizontal pass first ---- */

HPlan
make_hplan (const AxisWeights &a, int bpp, int row_bytes)
{
  HPlan h;
  h.bpp = bpp;
  h.bits = a.bits;
  h.block = bpp == 3 ? 24 : 8;
  h.len = (a.ksize * bpp + h.block - 1) / h.block * h.block;
  h.start.resize (a.out_size);
  h.w.assign (static_cast<size_t> (a.out_size) * h.len, 0);
  for (int j = 0; j < a.out_size; j++) {
    int s = a.first[j] * bpp;
    int shift = 0;
    if (s + h.len > row_bytes) {
      /* Slide the window left so it ends at the row's end; its leading weights are zero. */
      shift = (s + h.len - row_bytes + bpp - 1) / bpp * bpp;
      if (shift > s) {
        h.fits = false;
        shift = s;
      }
    }
    s -= shift;
    h.start[j] = s;
    for (int k = 0; k < a.count[j]; k++)
      for (int c = 0; c < bpp; c++) {
        size_t idx = static_cast<size_t> (j) * h.len + shift + k * bpp + c;
        if (shift + k * bpp + c < h.len)
          h.w[idx] = a.coeffs[static_cast<size_t> (j) * a.ksize + k];
      }
  }
  return h;
}

PI0_MULTIVERSION void
hpass_row_3 (const uint8_t *row, const HPlan &h, int n_out, const int off[3], uint8_t *r,
             uint8_t *g, uint8_t *b)
{
  for (int j = 0; j < n_out; j++) {
    const uint8_t *s = row + h.start[j];
    const int32_t *w = h.w.data () + static_cast<size_t> (j) * h.len;
    int32_t acc[24] = {0};
    for (int blk = 0; blk < h.len; blk += 24)
      for (int q = 0; q < 24; q++)
        acc[q] += static_cast<int32_t> (s[blk + q]) * w[blk + q];
    const int32_t half = 1 << (h.bits - 1);
    int32_t c[3] = {half, half, half};
    for (int q = 0; q < 24; q++)
      c[q % 3] += acc[q];
    r[j] = clip8 (c[off[0]], h.bits);
    g[j] = clip8 (c[off[1]], h.bits);
    b[j] = clip8 (c[off[2]], h.bits);
  }
}

PI0_MULTIVERSION void
hpass_row_4 (const uint8_t *row, const HPlan &h, int n_out, const int off[3], uint8_t *r,
             uint8_t *g, uint8_t *b)
{
  for (int j = 0; j < n_out; j++) {
    const uint8_t *s = row + h.start[j];
    const int32_t *w = h.w.data () + static_cast<size_t> (j) * h.len;
    int32_t acc[8] = {0};
    for (int blk = 0; blk < h.len; blk += 8)
      for (int q = 0; q < 8; q++)
        acc[q] += static_cast<int32_t> (s[blk + q]) * w[blk + q];
    int32_t c[4];
    for (int q = 0; q < 4; q++)
      c[q] = (1 << (h.bits - 1)) + acc[q] + acc[q + 4];
    r[j] = clip8 (c[off[0]], h.bits);
    g[j] = clip8 (c[off[1]], h.bits);
    b[j] = clip8 (c[off[2]], h.bits);
  }
}

PI0_MULTIVERSION void
hpass_row_1 (const uint8_t *row, const HPlan &h, int n_out, uint8_t *r)
{
  for (int j = 0; j < n_out; j++) {
    const uint8_t *s = row + h.start[j];
    const int32_t *w = h.w.data () + static_cast<size_t> (j) * h.len;
    int32_t acc[8] = {0};
    for (int blk = 0; blk < h.len; blk += 8)
      for (int q = 0; q < 8; q++)
        acc[q] += static_cast<int32_t> (s[blk + q]) * w[blk + q];
    int32_t c = 1 << (h.bits - 1);
    for (int q = 0; q < 8; q++)
      c += acc[q];
    r[j] = clip8 (c, h.bits);
  }
}

void
hpass_row_scalar (const uint8_t *row, const AxisWeights &a, int bpp, const int off[3], uint8_t *r,
                  uint8_t *g, uint8_t *b)
{
  for (int j = 0; j < a.out_size; j++) {
    const int32_t *w = a.coeffs.data () + static_cast<size_t> (j) * a.ksize;
    const int32_t half = 1 << (a.bits - 1);
    int32_t c[3] = {half, half, half};
    for (int k = 0; k < a.count[j]; k++) {
      const uint8_t *px = row + static_cast<size_t> (a.first[j] + k) * bpp;
      for (int ch = 0; ch < 3; ch++)
        c[ch] += px[off[ch]] * w[k];
    }
    r[j] = clip8 (c[0], a.bits);
    g[j] = clip8 (c[1], a.bits);
    b[j] = clip8 (c[2], a.bits);
  }
}

PI0_MULTIVERSION void
vpass_row (const uint8_t *tmp, size_t tmp_stride, int n, const int32_t *w, int count, uint8_t *out,
           int bits)
{
  int32_t acc[256];
  for (int x0 = 0; x0 < n; x0 += 256) {
    const int m = std::min (256, n - x0);
    for (int x = 0; x < m; x++)
      acc[x] = 1 << (bits - 1);
    for (int k = 0; k < count; k++) {
      const uint8_t *s = tmp + k * tmp_stride + x0;
      const int32_t wk = w[k];
      for (int x = 0; x < m; x++)
        acc[x] += static_cast<int32_t> (s[x]) * wk;
    }
    for (int x = 0; x < m; x++)
      out[x0 + x] = clip8 (acc[x], bits);
  }
}

/* ---- filter=antialias: vertical pass first ---- */

namespace
{

#if defined(__GNUC__) && defined(__x86_64__)
/* n <= kFastMaxTaps (vsum checks). */
__attribute__ ((target ("avx2"))) void
vsum_avx2 (const uint8_t *const *rows, const int16_t *w, int n, int len, uint8_t *out, int bits)
{
  /* Weights of each pair of rows, as the 32-bit pattern pmaddwd wants (odd n: zero partner). */
  int32_t wp[(kFastMaxTaps + 1) / 2];
  const int np = (n + 1) / 2;
  for (int k = 0; k < np; k++) {
    const uint16_t w0 = static_cast<uint16_t> (w[2 * k]);
    const uint16_t w1 = 2 * k + 1 < n ? static_cast<uint16_t> (w[2 * k + 1]) : 0;
    wp[k] = static_cast<int32_t> (w0 | (static_cast<uint32_t> (w1) << 16));
  }
  const uint8_t *zero_row = rows[0]; /* any readable row; its weight is 0 */
  const __m256i half = _mm256_set1_epi32 (1 << (bits - 1));
  const __m128i sh = _mm_cvtsi32_si128 (bits);
  int i = 0;
  /* 32 bytes per step: four accumulators share each weight broadcast. */
  for (; i + 32 <= len; i += 32) {
    __m256i l0 = half, h0 = half, l1 = half, h1 = half;
    for (int k = 0; k < np; k++) {
      const uint8_t *ra = rows[2 * k] + i;
      const uint8_t *rb = (2 * k + 1 < n ? rows[2 * k + 1] : zero_row) + i;
      const __m256i wk = _mm256_set1_epi32 (wp[k]);
      const __m256i a0 = _mm256_cvtepu8_epi16 (_mm_loadu_si128 ((const __m128i *)ra));
      const __m256i b0 = _mm256_cvtepu8_epi16 (_mm_loadu_si128 ((const __m128i *)rb));
      const __m256i a1 = _mm256_cvtepu8_epi16 (_mm_loadu_si128 ((const __m128i *)(ra + 16)));
      const __m256i b1 = _mm256_cvtepu8_epi16 (_mm_loadu_si128 ((const __m128i *)(rb + 16)));
      l0 = _mm256_add_epi32 (l0, _mm256_madd_epi16 (_mm256_unpacklo_epi16 (a0, b0), wk));
      h0 = _mm256_add_epi32 (h0, _mm256_madd_epi16 (_mm256_unpackhi_epi16 (a0, b0), wk));
      l1 = _mm256_add_epi32 (l1, _mm256_madd_epi16 (_mm256_unpacklo_epi16 (a1, b1), wk));
      h1 = _mm256_add_epi32 (h1, _mm256_madd_epi16 (_mm256_unpackhi_epi16 (a1, b1), wk));
    }
    /* The in-lane unpacks above and the in-lane packs here cancel out; saturation is PIL's
     * clip to 0..255. */
    const __m256i p0 = _mm256_packs_epi32 (_mm256_sra_epi32 (l0, sh), _mm256_sra_epi32 (h0, sh));
    const __m256i p1 = _mm256_packs_epi32 (_mm256_sra_epi32 (l1, sh), _mm256_sra_epi32 (h1, sh));
    const __m256i p8 = _mm256_permute4x64_epi64 (_mm256_packus_epi16 (p0, p1), 0xD8);
    _mm256_storeu_si256 ((__m256i *)(out + i), p8);
  }
  for (; i < len; i++) {
    int32_t acc = 1 << (bits - 1);
    for (int k = 0; k < n; k++)
      acc += rows[k][i] * w[k];
    out[i] = clip8 (acc, bits);
  }
}
#endif

void
vsum_generic (const uint8_t *const *rows, const int16_t *w, int n, int len, uint8_t *out, int bits)
{
  int32_t acc[512];
  for (int i0 = 0; i0 < len; i0 += 512) {
    const int m = std::min (512, len - i0);
    for (int i = 0; i < m; i++)
      acc[i] = 1 << (bits - 1);
    for (int k = 0; k < n; k++) {
      const uint8_t *s = rows[k] + i0;
      const int32_t wk = w[k];
      for (int i = 0; i < m; i++)
        acc[i] += s[i] * wk;
    }
    for (int i = 0; i < m; i++)
      out[i0 + i] = clip8 (acc[i], bits);
  }
}

} // namespace

void
vsum (const uint8_t *const *rows, const int16_t *w, int n, int len, uint8_t *out, int bits)
{
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports ("avx2");
  if (avx2 && n <= kFastMaxTaps) {
    vsum_avx2 (rows, w, n, len, out, bits);
    return;
  }
#endif
  vsum_generic (rows, w, n, len, out, bits);
}

PI0_MULTIVERSION void
vacc32 (const uint8_t *const *rows, const int32_t *w, int n, int len, int32_t *__restrict acc)
{
  for (int k = 0; k < n; k++) {
    const uint8_t *__restrict s = rows[k];
    const int32_t wk = w[k];
    for (int i = 0; i < len; i++)
      acc[i] += s[i] * wk;
  }
}

HPlan16
make_hplan16 (const AxisWeights &a, int row_len)
{
  HPlan16 h;
  if (a.bits > 15) {
    h.fits = false; /* the weights do not fit int16: the caller takes the 32-bit scalar pass */
    return h;
  }
  h.len = (a.ksize + 15) / 16 * 16;
  h.start.resize (a.out_size);
  h.w.assign (static_cast<size_t> (a.out_size) * h.len, 0);
  for (int j = 0; j < a.out_size; j++) {
    int s = a.first[j], shift = 0;
    if (s + h.len > row_len) {
      shift = s + h.len - row_len;
      if (shift > s) {
        h.fits = false;
        shift = s;
      }
    }
    h.start[j] = s - shift;
    for (int k = 0; k < a.count[j] && shift + k < h.len; k++)
      h.w[static_cast<size_t> (j) * h.len + shift + k] =
          static_cast<int16_t> (a.coeffs[static_cast<size_t> (j) * a.ksize + k]);
  }
  return h;
}

namespace
{

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__ ((target ("avx2"))) void
hpass16_avx2 (const uint8_t *row, const HPlan16 &h, int n_out, uint8_t *out, int bits)
{
  const int L = h.len;
  int j = 0;
  const __m128i sh = _mm_cvtsi32_si128 (bits);
  const __m128i half = _mm_set1_epi32 (1 << (bits - 1));
  for (; j + 4 <= n_out; j += 4) {
    __m256i acc[4];
    for (int q = 0; q < 4; q++) {
      const uint8_t *s = row + h.start[j + q];
      const int16_t *w = h.w.data () + static_cast<size_t> (j + q) * L;
      __m256i a = _mm256_setzero_si256 ();
      for (int b = 0; b < L; b += 16) {
        const __m256i px = _mm256_cvtepu8_epi16 (_mm_loadu_si128 ((const __m128i *)(s + b)));
        a = _mm256_add_epi32 (
            a, _mm256_madd_epi16 (px, _mm256_loadu_si256 ((const __m256i *)(w + b))));
      }
      acc[q] = a;
    }
    /* Four dot products reduced together. */
    const __m256i t =
        _mm256_hadd_epi32 (_mm256_hadd_epi32 (acc[0], acc[1]), _mm256_hadd_epi32 (acc[2], acc[3]));
    __m128i s4 = _mm_add_epi32 (_mm256_castsi256_si128 (t), _mm256_extracti128_si256 (t, 1));
    s4 = _mm_sra_epi32 (_mm_add_epi32 (s4, half), sh);
    const __m128i p16 = _mm_packs_epi32 (s4, s4);
    const int v = _mm_cvtsi128_si32 (_mm_packus_epi16 (p16, p16));
    std::memcpy (out + j, &v, 4);
  }
  for (; j < n_out; j++) {
    const uint8_t *s = row + h.start[j];
    const int16_t *w = h.w.data () + static_cast<size_t> (j) * L;
    int32_t acc = 1 << (bits - 1);
    for (int k = 0; k < L; k++)
      acc += s[k] * w[k];
    out[j] = clip8 (acc, bits);
  }
}
#endif

} // namespace

void
hpass16 (const uint8_t *row, const HPlan16 &h, int n_out, uint8_t *out, int bits)
{
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports ("avx2");
  if (avx2) {
    hpass16_avx2 (row, h, n_out, out, bits);
    return;
  }
#endif
  for (int j = 0; j < n_out; j++) {
    const uint8_t *s = row + h.start[j];
    const int16_t *w = h.w.data () + static_cast<size_t> (j) * h.len;
    int32_t acc = 1 << (bits - 1);
    for (int k = 0; k < h.len; k++)
      acc += s[k] * w[k];
    out[j] = clip8 (acc, bits);
  }
}

namespace
{

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__ ((target ("avx2"))) void
byte_planes_simd (const uint8_t *s, int bpp, int x0, int x1, uint8_t *const *P)
{
  int x = x0;
  if (bpp == 3) {
    /* 16 pixels = 48 bytes per step; each plane gathers from the three 16-byte loads. */
    const __m128i m[3][3] = {
        {_mm_setr_epi8 (0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
         _mm_setr_epi8 (-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1),
         _mm_setr_epi8 (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13)},
        {_mm_setr_epi8 (1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
         _mm_setr_epi8 (-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1),
         _mm_setr_epi8 (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14)},
        {_mm_setr_epi8 (2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
         _mm_setr_epi8 (-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1),
         _mm_setr_epi8 (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15)},
    };
    for (; x + 16 <= x1; x += 16) {
      const uint8_t *p = s + static_cast<size_t> (x) * 3;
      const __m128i a0 = _mm_loadu_si128 ((const __m128i *)p);
      const __m128i a1 = _mm_loadu_si128 ((const __m128i *)(p + 16));
      const __m128i a2 = _mm_loadu_si128 ((const __m128i *)(p + 32));
      for (int o = 0; o < 3; o++) {
        const __m128i v = _mm_or_si128 (
            _mm_or_si128 (_mm_shuffle_epi8 (a0, m[o][0]), _mm_shuffle_epi8 (a1, m[o][1])),
            _mm_shuffle_epi8 (a2, m[o][2]));
        _mm_storeu_si128 ((__m128i *)(P[o] + x), v);
      }
    }
  } else {
    const __m128i g = _mm_setr_epi8 (0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (; x + 16 <= x1; x += 16) {
      const uint8_t *p = s + static_cast<size_t> (x) * 4;
      __m128i t[4];
      for (int i = 0; i < 4; i++)
        t[i] = _mm_shuffle_epi8 (_mm_loadu_si128 ((const __m128i *)(p + 16 * i)), g);
      const __m128i lo01 = _mm_unpacklo_epi32 (t[0], t[1]), hi01 = _mm_unpackhi_epi32 (t[0], t[1]);
      const __m128i lo23 = _mm_unpacklo_epi32 (t[2], t[3]), hi23 = _mm_unpackhi_epi32 (t[2], t[3]);
      _mm_storeu_si128 ((__m128i *)(P[0] + x), _mm_unpacklo_epi64 (lo01, lo23));
      _mm_storeu_si128 ((__m128i *)(P[1] + x), _mm_unpackhi_epi64 (lo01, lo23));
      _mm_storeu_si128 ((__m128i *)(P[2] + x), _mm_unpacklo_epi64 (hi01, hi23));
      _mm_storeu_si128 ((__m128i *)(P[3] + x), _mm_unpackhi_epi64 (hi01, hi23));
    }
  }
  for (; x < x1; x++)
    for (int o = 0; o < bpp; o++)
      P[o][x] = s[static_cast<size_t> (x) * bpp + o];
}
#endif

} // namespace

void
byte_planes (const uint8_t *s, int bpp, int x0, int x1, uint8_t *const *P)
{
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports ("avx2");
  if (avx2) {
    byte_planes_simd (s, bpp, x0, x1, P);
    return;
  }
#endif
  for (int x = x0; x < x1; x++)
    for (int o = 0; o < bpp; o++)
      P[o][x] = s[static_cast<size_t> (x) * bpp + o];
}

} // namespace pi0::prep
