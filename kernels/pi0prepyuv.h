/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Where the samples of a YUV row lie, for every YUV format pi0prep reads. Included by both
 * the CPU path (kernels/pi0prepyuv.cpp, kernels/pi0prepcpu.cpp) and the CUDA kernels
 * (kernels/pi0prepkernels.cu) so that the CPU and CUDA paths pick the same chroma sample for
 * every pixel: the one of the pixel's 2x1 (4:2:2) or 2x2 (4:2:0) block, no interpolation. */

#include "kernels/pi0prep.h"

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define PI0_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PI0_HOST_DEVICE inline
#endif

namespace pi0::prep
{

PI0_HOST_DEVICE bool
format_is_yuv (Format f)
{
  switch (f) {
    case Format::NV12:
    case Format::NV21:
    case Format::I420:
    case Format::YV12:
    case Format::Y42B:
    case Format::Y444:
    case Format::YUY2:
    case Format::UYVY:
      return true;
    default:
      return false;
  }
}

/* Luma of pixel x is y[x * ystep]; its chroma u[c], v[c] with c = (x >> cshift) * cstep. */
struct YuvRow {
  const uint8_t *y, *u, *v;
  int ystep, cstep, cshift;
};

/* Row @row of a YUV frame whose planes (in memory order, as GstVideoFrame gives them) and
 * strides are @planes, @strides. */
PI0_HOST_DEVICE YuvRow
yuv_row (Format f, const uint8_t *const planes[3], const size_t strides[3], int row)
{
  const uint8_t *y = planes[0] + strides[0] * row;
  if (f == Format::YUY2) /* Y0 U Y1 V */
    return {y, y + 1, y + 3, 2, 4, 1};
  if (f == Format::UYVY) /* U Y0 V Y1 */
    return {y + 1, y, y + 2, 2, 4, 1};
  /* 4:2:0 chroma rows are shared by two luma rows; 4:2:2 and 4:4:4 have one per row. */
  const int crow = (f == Format::Y42B || f == Format::Y444) ? row : row / 2;
  const uint8_t *c1 = planes[1] + strides[1] * crow;
  if (f == Format::NV12)
    return {y, c1, c1 + 1, 1, 2, 1};
  if (f == Format::NV21)
    return {y, c1 + 1, c1, 1, 2, 1};
  const uint8_t *c2 = planes[2] + strides[2] * crow;
  if (f == Format::YV12) /* the V plane comes before the U plane */
    return {y, c2, c1, 1, 1, 1};
  return {y, c1, c2, 1, 1, f == Format::Y444 ? 0 : 1}; /* I420, Y42B, Y444 */
}

} // namespace pi0::prep
