/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Internal to kernels/: the CUDA kernels (kernels/pi0prepkernels.cu, nvcc) as the host code
 * (kernels/pi0prepcuda.cpp, the host compiler) launches them. What both sides must agree on is
 * here: the tile sizes the host plans shared memory with, and the frame and parameters each
 * kernel takes by value. Each launcher enqueues one kernel on @stream and returns at once; the
 * caller collects launch errors with cudaGetLastError(). */

#include "kernels/pi0prep.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pi0::prep
{

/* Output columns per block of the tiled kernels. */
constexpr int kTileW = 32;
/* Shared memory a tiled kernel may use; beyond it the two-pass fallback takes over. */
constexpr size_t kMaxShared = 48 * 1024;
/* The two-pass fallback's intermediate image: at most this many bytes per strip of output rows
 * (one output row at least). */
constexpr size_t kMaxIntermediate = 64u << 20;

/* A frame as the kernels read it: planes are device pointers, off[] the bytes of R, G, B in a
 * packed pixel, bpp its size. */
struct DevImage {
  int format;
  int width, height;
  const uint8_t *planes[3];
  size_t strides[3];
  int off[3];
  int bpp;
  YuvMatrix yuv;
};

/* The output (W x H, dtype), where the resized rectangle lies in it, the normalization, and
 * whether the view is valid (a masked one is the pad value everywhere). */
struct DevParams {
  int W, H, dtype;
  int dst_x, dst_y, dst_w, dst_h;
  float mean[3], std[3];
  int valid;
};

/* The pad value over the whole output. */
void launch_pad (const DevParams &p, void *out, cudaStream_t stream);
/* filter=bilinear from the tap tables (bilinear_taps of each axis). */
void launch_bilinear (const DevImage &im, const DevParams &p, const int *hi0, const int *hi1,
                      const float *hl, const int *vi0, const int *vi1, const float *vl, void *out,
                      cudaStream_t stream);
/* filter=pil in tiles of kTileW columns x @th rows, @shared bytes of shared memory each. */
void launch_pil (const DevImage &im, const DevParams &p, int th, size_t shared, const int *hfirst,
                 const int *hcount, const int *hcoef, int hk, const int *vfirst, const int *vcount,
                 const int *vcoef, int vk, void *out, cudaStream_t stream);
/* filter=antialias in tiles of kTileW columns x @th rows, reading at most @max_cols source
 * columns per tile. */
void launch_antialias (const DevImage &im, const DevParams &p, int th, size_t shared, int max_cols,
                       const int *hfirst, const int *hcount, const int *hcoef, int hk, int hbits,
                       const int *vfirst, const int *vcount, const int *vcoef, int vk, int vbits,
                       void *out, cudaStream_t stream);

/* ---- the two-pass fallback, one strip of output rows at a time through @tmp ---- */

/* filter=pil, first pass: source rows [row0, row0 + n_rows) filtered horizontally. */
void launch_pil_rows (const DevImage &im, int row0, int n_rows, int dst_w, const int *hfirst,
                      const int *hcount, const int *hcoef, int hk, int bits, uint8_t *tmp,
                      cudaStream_t stream);
/* filter=pil, second pass: rect rows [r0, r1) filtered vertically, normalized and stored. */
void launch_pil_cols (const DevParams &p, int r0, int r1, int row0, const int *vfirst,
                      const int *vcount, const int *vcoef, int vk, int bits, const uint8_t *tmp,
                      void *out, cudaStream_t stream);
/* filter=antialias, first pass: rect rows [r0, r0 + n_rows) filtered vertically over source
 * columns [col0, col0 + n_cols). */
void launch_antialias_rows (const DevImage &im, int r0, int n_rows, int col0, int n_cols,
                            const int *vfirst, const int *vcount, const int *vcoef, int vk,
                            int bits, uint8_t *tmp, cudaStream_t stream);
/* filter=antialias, second pass: rect rows [r0, r1) filtered horizontally, normalized and
 * stored. */
void launch_antialias_cols (const DevParams &p, int r0, int r1, int col0, int n_cols,
                            const int *hfirst, const int *hcount, const int *hcoef, int hk,
                            int bits, const uint8_t *tmp, void *out, cudaStream_t stream);

} // namespace pi0::prep
