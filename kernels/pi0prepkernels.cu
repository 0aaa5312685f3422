/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The CUDA kernels of pi0prep, the twins of the CPU path (prep_cpu): one fused kernel per view
 * (format conversion, resize, pad, normalize, dtype and plane-major layout in one pass over the
 * source), the two-pass fallback for filters too long for shared memory, and their launchers.
 * Only device code and <<<>>> launches here; what to launch, with which tables, on which
 * stream, is the host's (kernels/pi0prepcuda.cpp), compiled by the host compiler. */

#include "kernels/pi0prepkernels.h"
#include "kernels/pi0prepyuv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace pi0::prep
{

namespace
{

constexpr int kThreadsY = 8;
constexpr int kFallbackThreads = 256;
constexpr int kFallbackMaxBlocks = 65535;

/* normalize_value of pi0prep.h with IEEE-rounded operations (no contraction, no approximate
 * division), so that it equals the CPU path's table bit for bit. */
__device__ __forceinline__ float
normalize (const DevParams &p, float v, int c)
{
  return __fdiv_rn (__fsub_rn (__fdiv_rn (v, 255.f), p.mean[c]), p.std[c]);
}

__device__ __forceinline__ float
round8f (float v)
{
  v = floorf (v + 0.5f);
  return fminf (fmaxf (v, 0.f), 255.f);
}

/* RGB of one source pixel. Matches pi0prepyuv.cpp's YUV rounding: the products are exact in
 * float (coefficients are multiples of 2^-14), so the fma contraction changes nothing. */
__device__ __forceinline__ void
fetch (const DevImage &im, int x, int y, int rgb[3])
{
  const Format f = static_cast<Format> (im.format);
  if (format_is_yuv (f)) {
    const YuvRow row = yuv_row (f, im.planes, im.strides, y);
    const int c = (x >> row.cshift) * row.cstep;
    const float yy = im.yuv.ys * (static_cast<float> (row.y[x * row.ystep]) - im.yuv.y_offset);
    const float u = row.u[c] - 128.f, v = row.v[c] - 128.f;
    rgb[0] = static_cast<int> (round8f (yy + im.yuv.rv * v));
    rgb[1] = static_cast<int> (round8f (yy - im.yuv.gu * u - im.yuv.gv * v));
    rgb[2] = static_cast<int> (round8f (yy + im.yuv.bu * u));
    return;
  }
  const uint8_t *px = im.planes[0] + im.strides[0] * y + static_cast<size_t> (x) * im.bpp;
  rgb[0] = px[im.off[0]];
  rgb[1] = px[im.off[1]];
  rgb[2] = px[im.off[2]];
}

__device__ __forceinline__ int
clip8 (int ss, int bits)
{
  if (ss >= (1 << bits << 8))
    return 255;
  if (ss <= 0)
    return 0;
  return ss >> bits;
}

__device__ __forceinline__ void
store (void *out, size_t idx, float v, int dtype)
{
  if (dtype == static_cast<int> (DType::Float32))
    static_cast<float *> (out)[idx] = v;
  else if (dtype == static_cast<int> (DType::Float16))
    static_cast<__half *> (out)[idx] = __float2half_rn (v);
  else
    static_cast<__nv_bfloat16 *> (out)[idx] = __float2bfloat16_rn (v);
}

__device__ __forceinline__ void
store_pad (const DevParams &p, void *out, int x, int y)
{
  const size_t plane = static_cast<size_t> (p.W) * p.H;
  for (int c = 0; c < 3; c++)
    store (out, c * plane + static_cast<size_t> (y) * p.W + x, normalize (p, 0.f, c), p.dtype);
}

/* filter=pil. One block = 32 output columns x th output rows. Stage 1 filters the source rows
 * those output rows need horizontally into shared memory (uint8, like PIL's intermediate
 * image); stage 2 filters vertically, normalizes and writes the three planes. */
__global__ void
pil_kernel (DevImage im, DevParams p, int th, const int *hfirst, const int *hcount,
            const int *hcoef, int hk, const int *vfirst, const int *vcount, const int *vcoef,
            int vk, void *out)
{
  extern __shared__ uint8_t tmp[];                  /* [rows][kTileW][3] */
  const int ox = blockIdx.x * kTileW + threadIdx.x; /* output column */
  const int oy0 = blockIdx.y * th;
  const int tx0 = blockIdx.x * kTileW - p.dst_x; /* rect column of thread 0 */
  const int col = tx0 + threadIdx.x;             /* this thread's rect column */

  /* The block's rect rows. */
  const int r_lo = max (oy0 - p.dst_y, 0);
  const int r_hi = min (oy0 + th - p.dst_y, p.dst_h); /* exclusive */
  const bool any_rows = r_lo < r_hi;
  int src_first = 0, n_rows = 0;
  if (any_rows) {
    src_first = vfirst[r_lo];
    n_rows = vfirst[r_hi - 1] + vcount[r_hi - 1] - src_first;
  }

  if (any_rows && col >= 0 && col < p.dst_w) {
    const int *w = hcoef + static_cast<size_t> (col) * hk;
    const int xf = hfirst[col], nk = hcount[col];
    for (int i = threadIdx.y; i < n_rows; i += blockDim.y) {
      int acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                    1 << (kPrecisionBits - 1)};
      for (int k = 0; k < nk; k++) {
        int rgb[3];
        fetch (im, xf + k, src_first + i, rgb);
        acc[0] += rgb[0] * w[k];
        acc[1] += rgb[1] * w[k];
        acc[2] += rgb[2] * w[k];
      }
      uint8_t *t = tmp + (static_cast<size_t> (i) * kTileW + threadIdx.x) * 3;
      t[0] = static_cast<uint8_t> (clip8 (acc[0], kPrecisionBits));
      t[1] = static_cast<uint8_t> (clip8 (acc[1], kPrecisionBits));
      t[2] = static_cast<uint8_t> (clip8 (acc[2], kPrecisionBits));
    }
  }
  __syncthreads ();

  if (ox >= p.W)
    return;
  for (int ry = threadIdx.y; ry < th; ry += blockDim.y) {
    const int oy = oy0 + ry;
    if (oy >= p.H)
      break;
    const int r = oy - p.dst_y;
    if (!(r >= 0 && r < p.dst_h && col >= 0 && col < p.dst_w)) {
      store_pad (p, out, ox, oy);
      continue;
    }
    const int *w = vcoef + static_cast<size_t> (r) * vk;
    const int yf = vfirst[r] - src_first, nk = vcount[r];
    int acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
    for (int k = 0; k < nk; k++) {
      const uint8_t *t = tmp + (static_cast<size_t> (yf + k) * kTileW + threadIdx.x) * 3;
      acc[0] += t[0] * w[k];
      acc[1] += t[1] * w[k];
      acc[2] += t[2] * w[k];
    }
    const size_t plane = static_cast<size_t> (p.W) * p.H;
    for (int c = 0; c < 3; c++)
      store (out, c * plane + static_cast<size_t> (oy) * p.W + ox,
             normalize (p, static_cast<float> (clip8 (acc[c], kPrecisionBits)), c), p.dtype);
  }
}

/* filter=antialias: the same filter with 14-bit weights, vertical pass first, as the CPU path.
 * One block = 32 output columns x th output rows. Stage 1 filters vertically, for each of the
 * block's output rows, the source columns its 32 output columns read (coalesced along x) into
 * shared memory, rounded to uint8; stage 2 filters horizontally, normalizes and writes. */
__global__ void
antialias_kernel (DevImage im, DevParams p, int th, int max_cols, const int *hfirst,
                  const int *hcount, const int *hcoef, int hk, int hbits, const int *vfirst,
                  const int *vcount, const int *vcoef, int vk, int vbits, void *out)
{
  extern __shared__ uint8_t tmp[]; /* [th][max_cols][3] */
  const int ox = blockIdx.x * kTileW + threadIdx.x;
  const int oy0 = blockIdx.y * th;
  const int c_lo = max (static_cast<int> (blockIdx.x) * kTileW - p.dst_x, 0);
  const int c_hi = min (static_cast<int> (blockIdx.x) * kTileW + kTileW - p.dst_x, p.dst_w);
  const int r_lo = max (oy0 - p.dst_y, 0);
  const int r_hi = min (oy0 + th - p.dst_y, p.dst_h);
  int x_first = 0, n_cols = 0;
  if (c_lo < c_hi) {
    x_first = hfirst[c_lo];
    n_cols = min (hfirst[c_hi - 1] + hcount[c_hi - 1] - x_first, max_cols);
  }
  const int n_rows = max (r_hi - r_lo, 0);
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthreads = blockDim.x * blockDim.y;
  for (int idx = tid; idx < n_rows * n_cols; idx += nthreads) {
    const int rr = idx / n_cols, xc = idx % n_cols;
    const int r = r_lo + rr;
    const int *w = vcoef + static_cast<size_t> (r) * vk;
    const int yf = vfirst[r], nk = vcount[r];
    int acc[3] = {1 << (vbits - 1), 1 << (vbits - 1), 1 << (vbits - 1)};
    for (int k = 0; k < nk; k++) {
      int rgb[3];
      fetch (im, x_first + xc, yf + k, rgb);
      acc[0] += rgb[0] * w[k];
      acc[1] += rgb[1] * w[k];
      acc[2] += rgb[2] * w[k];
    }
    uint8_t *t = tmp + (static_cast<size_t> (rr) * max_cols + xc) * 3;
    t[0] = static_cast<uint8_t> (clip8 (acc[0], vbits));
    t[1] = static_cast<uint8_t> (clip8 (acc[1], vbits));
    t[2] = static_cast<uint8_t> (clip8 (acc[2], vbits));
  }
  __syncthreads ();

  if (ox >= p.W)
    return;
  const int col = ox - p.dst_x;
  for (int ry = threadIdx.y; ry < th; ry += blockDim.y) {
    const int oy = oy0 + ry;
    if (oy >= p.H)
      break;
    const int r = oy - p.dst_y;
    if (!(r >= 0 && r < p.dst_h && col >= 0 && col < p.dst_w)) {
      store_pad (p, out, ox, oy);
      continue;
    }
    const int *w = hcoef + static_cast<size_t> (col) * hk;
    const int xf = hfirst[col] - x_first, nk = hcount[col];
    int acc[3] = {1 << (hbits - 1), 1 << (hbits - 1), 1 << (hbits - 1)};
    for (int k = 0; k < nk; k++) {
      const uint8_t *t = tmp + (static_cast<size_t> (r - r_lo) * max_cols + xf + k) * 3;
      acc[0] += t[0] * w[k];
      acc[1] += t[1] * w[k];
      acc[2] += t[2] * w[k];
    }
    const size_t plane = static_cast<size_t> (p.W) * p.H;
    for (int c = 0; c < 3; c++)
      store (out, c * plane + static_cast<size_t> (oy) * p.W + ox,
             normalize (p, static_cast<float> (clip8 (acc[c], hbits)), c), p.dtype);
  }
}

__global__ void
bilinear_kernel (DevImage im, DevParams p, const int *hi0, const int *hi1, const float *hl,
                 const int *vi0, const int *vi1, const float *vl, void *out)
{
  const int ox = blockIdx.x * blockDim.x + threadIdx.x;
  const int oy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ox >= p.W || oy >= p.H)
    return;
  const int x = ox - p.dst_x, y = oy - p.dst_y;
  if (!p.valid || x < 0 || x >= p.dst_w || y < 0 || y >= p.dst_h) {
    store_pad (p, out, ox, oy);
    return;
  }
  int a[3], b[3], c[3], d[3];
  fetch (im, hi0[x], vi0[y], a);
  fetch (im, hi1[x], vi0[y], b);
  fetch (im, hi0[x], vi1[y], c);
  fetch (im, hi1[x], vi1[y], d);
  const float lx = hl[x], ly = vl[y];
  const size_t plane = static_cast<size_t> (p.W) * p.H;
  for (int ch = 0; ch < 3; ch++) {
    /* Same operation order as the CPU twin; __fmul_rn/__fadd_rn keep nvcc from contracting
     * into fma, which would round differently. */
    const float top = __fadd_rn (__fmul_rn (1.f - lx, static_cast<float> (a[ch])),
                                 __fmul_rn (lx, static_cast<float> (b[ch])));
    const float bot = __fadd_rn (__fmul_rn (1.f - lx, static_cast<float> (c[ch])),
                                 __fmul_rn (lx, static_cast<float> (d[ch])));
    const float v = __fadd_rn (__fmul_rn (1.f - ly, top), __fmul_rn (ly, bot));
    store (out, ch * plane + static_cast<size_t> (oy) * p.W + ox, normalize (p, v, ch), p.dtype);
  }
}

/* ---- Two-pass fallback ----
 * When the source span of one tile row does not fit in shared memory (a downscale beyond ~250x
 * on an axis: filter=pil over ~500 source rows, filter=antialias over ~16000 source columns),
 * the first pass writes its uint8 result for a strip of output rows to global memory and the
 * second pass reads it back: the same integer arithmetic as the tiled kernels, value by value,
 * with the intermediate bounded by kMaxIntermediate per strip. Grid-stride loops over 1-D
 * grids, so no launch dimension limit applies. */

__device__ __forceinline__ size_t
first_index ()
{
  return static_cast<size_t> (blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t
index_step ()
{
  return static_cast<size_t> (gridDim.x) * blockDim.x;
}

/* filter=pil, first pass: source rows [row0, row0 + n_rows) filtered horizontally into every
 * rect column: tmp[i][col][3]. */
__global__ void
pil_rows_kernel (DevImage im, int row0, int n_rows, int dst_w, const int *hfirst, const int *hcount,
                 const int *hcoef, int hk, int bits, uint8_t *tmp)
{
  const size_t total = static_cast<size_t> (n_rows) * dst_w;
  for (size_t idx = first_index (); idx < total; idx += index_step ()) {
    const int i = static_cast<int> (idx / dst_w), col = static_cast<int> (idx % dst_w);
    const int *w = hcoef + static_cast<size_t> (col) * hk;
    const int xf = hfirst[col], nk = hcount[col];
    int acc[3] = {1 << (bits - 1), 1 << (bits - 1), 1 << (bits - 1)};
    for (int k = 0; k < nk; k++) {
      int rgb[3];
      fetch (im, xf + k, row0 + i, rgb);
      acc[0] += rgb[0] * w[k];
      acc[1] += rgb[1] * w[k];
      acc[2] += rgb[2] * w[k];
    }
    for (int c = 0; c < 3; c++)
      tmp[idx * 3 + c] = static_cast<uint8_t> (clip8 (acc[c], bits));
  }
}

/* filter=pil, second pass: rect rows [r0, r1) filtered vertically from tmp (whose row 0 is
 * source row row0), normalized and stored. */
__global__ void
pil_cols_kernel (DevParams p, int r0, int r1, int row0, const int *vfirst, const int *vcount,
                 const int *vcoef, int vk, int bits, const uint8_t *tmp, void *out)
{
  const size_t total = static_cast<size_t> (r1 - r0) * p.dst_w;
  const size_t plane = static_cast<size_t> (p.W) * p.H;
  for (size_t idx = first_index (); idx < total; idx += index_step ()) {
    const int r = r0 + static_cast<int> (idx / p.dst_w), col = static_cast<int> (idx % p.dst_w);
    const int *w = vcoef + static_cast<size_t> (r) * vk;
    const int yf = vfirst[r] - row0, nk = vcount[r];
    int acc[3] = {1 << (bits - 1), 1 << (bits - 1), 1 << (bits - 1)};
    for (int k = 0; k < nk; k++) {
      const uint8_t *t = tmp + (static_cast<size_t> (yf + k) * p.dst_w + col) * 3;
      acc[0] += t[0] * w[k];
      acc[1] += t[1] * w[k];
      acc[2] += t[2] * w[k];
    }
    const size_t o = static_cast<size_t> (p.dst_y + r) * p.W + p.dst_x + col;
    for (int c = 0; c < 3; c++)
      store (out, c * plane + o, normalize (p, static_cast<float> (clip8 (acc[c], bits)), c),
             p.dtype);
  }
}

/* filter=antialias, first pass: rect rows [r0, r0 + n_rows) filtered vertically over source
 * columns [col0, col0 + n_cols): tmp[rr][xc][3]. */
__global__ void
antialias_rows_kernel (DevImage im, int r0, int n_rows, int col0, int n_cols, const int *vfirst,
                       const int *vcount, const int *vcoef, int vk, int bits, uint8_t *tmp)
{
  const size_t total = static_cast<size_t> (n_rows) * n_cols;
  for (size_t idx = first_index (); idx < total; idx += index_step ()) {
    const int r = r0 + static_cast<int> (idx / n_cols), xc = static_cast<int> (idx % n_cols);
    const int *w = vcoef + static_cast<size_t> (r) * vk;
    const int yf = vfirst[r], nk = vcount[r];
    int acc[3] = {1 << (bits - 1), 1 << (bits - 1), 1 << (bits - 1)};
    for (int k = 0; k < nk; k++) {
      int rgb[3];
      fetch (im, col0 + xc, yf + k, rgb);
      acc[0] += rgb[0] * w[k];
      acc[1] += rgb[1] * w[k];
      acc[2] += rgb[2] * w[k];
    }
    for (int c = 0; c < 3; c++)
      tmp[idx * 3 + c] = static_cast<uint8_t> (clip8 (acc[c], bits));
  }
}

/* filter=antialias, second pass: rect rows [r0, r1) filtered horizontally from tmp (whose
 * column 0 is source column col0), normalized and stored. */
__global__ void
antialias_cols_kernel (DevParams p, int r0, int r1, int col0, int n_cols, const int *hfirst,
                       const int *hcount, const int *hcoef, int hk, int bits, const uint8_t *tmp,
                       void *out)
{
  const size_t total = static_cast<size_t> (r1 - r0) * p.dst_w;
  const size_t plane = static_cast<size_t> (p.W) * p.H;
  for (size_t idx = first_index (); idx < total; idx += index_step ()) {
    const int rr = static_cast<int> (idx / p.dst_w), col = static_cast<int> (idx % p.dst_w);
    const int *w = hcoef + static_cast<size_t> (col) * hk;
    const int xf = hfirst[col] - col0, nk = hcount[col];
    int acc[3] = {1 << (bits - 1), 1 << (bits - 1), 1 << (bits - 1)};
    for (int k = 0; k < nk; k++) {
      const uint8_t *t = tmp + (static_cast<size_t> (rr) * n_cols + xf + k) * 3;
      acc[0] += t[0] * w[k];
      acc[1] += t[1] * w[k];
      acc[2] += t[2] * w[k];
    }
    const size_t o = static_cast<size_t> (p.dst_y + r0 + rr) * p.W + p.dst_x + col;
    for (int c = 0; c < 3; c++)
      store (out, c * plane + o, normalize (p, static_cast<float> (clip8 (acc[c], bits)), c),
             p.dtype);
  }
}

/* Blocks of kFallbackThreads for a grid-stride loop over n values. */
unsigned
fallback_blocks (size_t n)
{
  const size_t b = (n + kFallbackThreads - 1) / kFallbackThreads;
  return static_cast<unsigned> (std::max<size_t> (1, std::min<size_t> (b, kFallbackMaxBlocks)));
}

} // namespace

void
launch_pad (const DevParams &p, void *out, cudaStream_t stream)
{
  DevParams pad = p;
  pad.valid = 0;
  launch_bilinear (DevImage{}, pad, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, out,
                   stream);
}

void
launch_bilinear (const DevImage &im, const DevParams &p, const int *hi0, const int *hi1,
                 const float *hl, const int *vi0, const int *vi1, const float *vl, void *out,
                 cudaStream_t stream)
{
  const dim3 block (kTileW, kThreadsY);
  const dim3 grid ((p.W + kTileW - 1) / kTileW, (p.H + kThreadsY - 1) / kThreadsY);
  bilinear_kernel<<<grid, block, 0, stream>>> (im, p, hi0, hi1, hl, vi0, vi1, vl, out);
}

void
launch_pil (const DevImage &im, const DevParams &p, int th, size_t shared, const int *hfirst,
            const int *hcount, const int *hcoef, int hk, const int *vfirst, const int *vcount,
            const int *vcoef, int vk, void *out, cudaStream_t stream)
{
  const dim3 block (kTileW, kThreadsY);
  const dim3 grid ((p.W + kTileW - 1) / kTileW, (p.H + th - 1) / th);
  pil_kernel<<<grid, block, shared, stream>>> (im, p, th, hfirst, hcount, hcoef, hk, vfirst, vcount,
                                               vcoef, vk, out);
}

void
launch_antialias (const DevImage &im, const DevParams &p, int th, size_t shared, int max_cols,
                  const int *hfirst, const int *hcount, const int *hcoef, int hk, int hbits,
                  const int *vfirst, const int *vcount, const int *vcoef, int vk, int vbits,
                  void *out, cudaStream_t stream)
{
  const dim3 block (kTileW, kThreadsY);
  const dim3 grid ((p.W + kTileW - 1) / kTileW, (p.H + th - 1) / th);
  antialias_kernel<<<grid, block, shared, stream>>> (im, p, th, max_cols, hfirst, hcount, hcoef, hk,
                                                     hbits, vfirst, vcount, vcoef, vk, vbits, out);
}

void
launch_pil_rows (const DevImage &im, int row0, int n_rows, int dst_w, const int *hfirst,
                 const int *hcount, const int *hcoef, int hk, int bits, uint8_t *tmp,
                 cudaStream_t stream)
{
  const size_t n = static_cast<size_t> (n_rows) * dst_w;
  pil_rows_kernel<<<fallback_blocks (n), kFallbackThreads, 0, stream>>> (
      im, row0, n_rows, dst_w, hfirst, hcount, hcoef, hk, bits, tmp);
}

void
launch_pil_cols (const DevParams &p, int r0, int r1, int row0, const int *vfirst, const int *vcount,
                 const int *vcoef, int vk, int bits, const uint8_t *tmp, void *out,
                 cudaStream_t stream)
{
  const size_t n = static_cast<size_t> (r1 - r0) * p.dst_w;
  pil_cols_kernel<<<fallback_blocks (n), kFallbackThreads, 0, stream>>> (
      p, r0, r1, row0, vfirst, vcount, vcoef, vk, bits, tmp, out);
}

void
launch_antialias_rows (const DevImage &im, int r0, int n_rows, int col0, int n_cols,
                       const int *vfirst, const int *vcount, const int *vcoef, int vk, int bits,
                       uint8_t *tmp, cudaStream_t stream)
{
  const size_t n = static_cast<size_t> (n_rows) * n_cols;
  antialias_rows_kernel<<<fallback_blocks (n), kFallbackThreads, 0, stream>>> (
      im, r0, n_rows, col0, n_cols, vfirst, vcount, vcoef, vk, bits, tmp);
}

void
launch_antialias_cols (const DevParams &p, int r0, int r1, int col0, int n_cols, const int *hfirst,
                       const int *hcount, const int *hcoef, int hk, int bits, const uint8_t *tmp,
                       void *out, cudaStream_t stream)
{
  const size_t n = static_cast<size_t> (r1 - r0) * p.dst_w;
  antialias_cols_kernel<<<fallback_blocks (n), kFallbackThreads, 0, stream>>> (
      p, r0, r1, col0, n_cols, hfirst, hcount, hcoef, hk, bits, tmp, out);
}

} // namespace pi0::prep
