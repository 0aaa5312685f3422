/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* YUV to RGB on the CPU: the matrix from a colorimetry (make_yuv_matrix) and whole rows
 * converted in 2^-14 fixed point, packed for filter=pil and planar for filter=antialias. Which
 * sample a pixel reads is kernels/pi0prepyuv.h's, shared with the CUDA kernels. */

#include "kernels/pi0prep.h"
#include "kernels/pi0prepinternal.h"
#include "kernels/pi0prepyuv.h"

#include <algorithm>
#include <cmath>

namespace pi0::prep
{

YuvMatrix
make_yuv_matrix (double kr, double kb, bool full_range)
{
  const double kg = 1.0 - kr - kb;
  const double ys = full_range ? 1.0 : 255.0 / 219.0;
  const double cs = full_range ? 1.0 : 255.0 / 224.0;
  auto q = [] (double v) {
    return static_cast<float> (std::round (v * 16384.0) / 16384.0);
  };
  YuvMatrix m;
  m.y_offset = full_range ? 0.f : 16.f;
  m.ys = q (ys);
  m.rv = q (2.0 * (1.0 - kr) * cs);
  m.bu = q (2.0 * (1.0 - kb) * cs);
  m.gu = q (2.0 * (1.0 - kb) * kb / kg * cs);
  m.gv = q (2.0 * (1.0 - kr) * kr / kg * cs);
  return m;
}

namespace
{

/* The YuvMatrix in 2^-14 fixed point. Its coefficients are multiples of 2^-14
 * (make_yuv_matrix), so the integer form equals floor(v + 0.5) of the float formula exactly,
 * which is what the CUDA kernel and the test reference compute. */
struct YuvFixed {
  int ys, yo, rv, gu, gv, bu;
  explicit YuvFixed (const YuvMatrix &m)
      : ys (static_cast<int> (m.ys * 16384.f)), yo (static_cast<int> (m.y_offset)),
        rv (static_cast<int> (m.rv * 16384.f)), gu (static_cast<int> (m.gu * 16384.f)),
        gv (static_cast<int> (m.gv * 16384.f)), bu (static_cast<int> (m.bu * 16384.f))
  {
  }
};

/* Pixel i of three planar rows from its scaled luma and the chroma terms of R, G, B (the
 * rounding offset included in them). */
inline __attribute__ ((always_inline)) void
put_rgb (int y, int rc, int gc, int bc, uint8_t *R, uint8_t *G, uint8_t *B, int i)
{
  R[i] = static_cast<uint8_t> (std::min (std::max ((y + rc) >> 14, 0), 255));
  G[i] = static_cast<uint8_t> (std::min (std::max ((y + gc) >> 14, 0), 255));
  B[i] = static_cast<uint8_t> (std::min (std::max ((y + bc) >> 14, 0), 255));
}

/* One pixel from its luma and chroma samples (u, v still offset by 128). */
inline void
yuv_pixel (const YuvFixed &k, int luma, int u, int v, uint8_t *R, uint8_t *G, uint8_t *B, int i)
{
  u -= 128;
  v -= 128;
  put_rgb (k.ys * (luma - k.yo), k.rv * v + 8192, 8192 - k.gu * u - k.gv * v, k.bu * u + 8192, R, G,
           B, i);
}

/* Luma of pair i at Y[YSTEP * 2i] and Y[YSTEP * (2i + 1)], its chroma at U/V[CSTEP * i]. Pairs
 * of pixels share a chroma sample, which keeps the loop free of per-pixel index math so that it
 * vectorizes. */
template <int YSTEP, int CSTEP>
inline __attribute__ ((always_inline)) void
yuv_pairs (const uint8_t *__restrict Y, const uint8_t *__restrict U, const uint8_t *__restrict V,
           int pairs, const YuvFixed k, uint8_t *__restrict R, uint8_t *__restrict G,
           uint8_t *__restrict B)
{
  const int ys = k.ys, yo = k.yo, rv = k.rv, gu = k.gu, gv = k.gv, bu = k.bu;
  for (int i = 0; i < pairs; i++) {
    const int u = U[CSTEP * i] - 128, v = V[CSTEP * i] - 128;
    const int rc = rv * v + 8192, gc = 8192 - gu * u - gv * v, bc = bu * u + 8192;
    put_rgb (ys * (Y[YSTEP * 2 * i] - yo), rc, gc, bc, R, G, B, 2 * i);
    put_rgb (ys * (Y[YSTEP * (2 * i + 1)] - yo), rc, gc, bc, R, G, B, 2 * i + 1);
  }
}

/* I420, YV12, Y42B */
PI0_MULTIVERSION void
yuv_pairs_i420 (const uint8_t *Y, const uint8_t *U, const uint8_t *V, int pairs, const YuvFixed k,
                uint8_t *R, uint8_t *G, uint8_t *B)
{
  yuv_pairs<1, 1> (Y, U, V, pairs, k, R, G, B);
}

/* NV12, NV21 */
PI0_MULTIVERSION void
yuv_pairs_nv12 (const uint8_t *Y, const uint8_t *U, const uint8_t *V, int pairs, const YuvFixed k,
                uint8_t *R, uint8_t *G, uint8_t *B)
{
  yuv_pairs<1, 2> (Y, U, V, pairs, k, R, G, B);
}

/* YUY2, UYVY */
PI0_MULTIVERSION void
yuv_pairs_packed (const uint8_t *Y, const uint8_t *U, const uint8_t *V, int pairs, const YuvFixed k,
                  uint8_t *R, uint8_t *G, uint8_t *B)
{
  yuv_pairs<2, 4> (Y, U, V, pairs, k, R, G, B);
}

/* Y444: a chroma sample per pixel. */
PI0_MULTIVERSION void
yuv_pixels_444 (const uint8_t *__restrict Y, const uint8_t *__restrict U,
                const uint8_t *__restrict V, int n, const YuvFixed k, uint8_t *__restrict R,
                uint8_t *__restrict G, uint8_t *__restrict B)
{
  const int ys = k.ys, yo = k.yo, rv = k.rv, gu = k.gu, gv = k.gv, bu = k.bu;
  for (int i = 0; i < n; i++) {
    const int u = U[i] - 128, v = V[i] - 128;
    put_rgb (ys * (Y[i] - yo), rv * v + 8192, 8192 - gu * u - gv * v, bu * u + 8192, R, G, B, i);
  }
}

} // namespace

void
yuv_row_to_rgb (const Image &img, int y, uint8_t *dst)
{
  const YuvFixed k (img.yuv);
  const YuvRow row = yuv_row (img.format, img.planes, img.strides, y);
  for (int x = 0; x < img.width; x++) {
    const int c = (x >> row.cshift) * row.cstep;
    yuv_pixel (k, row.y[x * row.ystep], row.u[c], row.v[c], dst, dst + 1, dst + 2, 3 * x);
  }
}

void
yuv_row_to_planar (const Image &img, int y, uint8_t *R, uint8_t *G, uint8_t *B)
{
  const YuvFixed k (img.yuv);
  const YuvRow row = yuv_row (img.format, img.planes, img.strides, y);
  const int w = img.width;
  if (row.cshift == 0) {
    yuv_pixels_444 (row.y, row.u, row.v, w, k, R, G, B);
    return;
  }
  if (row.ystep == 2)
    yuv_pairs_packed (row.y, row.u, row.v, w / 2, k, R, G, B);
  else if (row.cstep == 2)
    yuv_pairs_nv12 (row.y, row.u, row.v, w / 2, k, R, G, B);
  else
    yuv_pairs_i420 (row.y, row.u, row.v, w / 2, k, R, G, B);
  if (w & 1) {
    const int x = w - 1, c = (x / 2) * row.cstep;
    yuv_pixel (k, row.y[x * row.ystep], row.u[c], row.v[c], R, G, B, x);
  }
}

} // namespace pi0::prep
