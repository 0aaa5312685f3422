/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The CUDA twin of the CPU path (prep_cpu): one fused kernel per view (format conversion,
 * resize, pad, normalize, dtype and plane-major layout in one pass over the source). */

#include "kernels/pi0prepcuda.h"
#include "kernels/pi0prepyuv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include <dlfcn.h>

namespace pi0::prep
{

std::string
cuda_error_text (cudaError_t err)
{
  return std::string (cudaGetErrorName (err)) + " (" + cudaGetErrorString (err) + ")";
}

namespace
{

constexpr int kTileW = 32;
constexpr int kThreadsY = 8;
constexpr size_t kMaxShared = 48 * 1024;
/* The two-pass fallback's intermediate image: at most this many bytes per strip of output rows
 * (one output row at least). */
constexpr size_t kMaxIntermediate = 64u << 20;
constexpr int kFallbackThreads = 256;
constexpr int kFallbackMaxBlocks = 65535;

struct DevImage {
  int format;
  int width, height;
  const uint8_t *planes[3];
  size_t strides[3];
  int off[3];
  int bpp;
  YuvMatrix yuv;
};

struct DevParams {
  int W, H, dtype;
  int dst_x, dst_y, dst_w, dst_h;
  float mean[3], std[3];
  int valid;
};

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

/* One strip of output rows of the two-pass fallback. pil: its source rows are
 * [src0, src0 + n_src). */
struct Strip {
  int r0, r1, src0, n_src;
};

} // namespace

struct CudaPrep::Slot {
  /* What the tables were built for. */
  int in_w = -1, in_h = -1;
  Params params;
  bool have = false;
  Geometry g;
  int hk = 0, vk = 0, th = 1, max_cols = 0;
  int hbits = kPrecisionBits, vbits = kPrecisionBits;
  size_t shared = 0;
  void *dev = nullptr;
  size_t dev_size = 0;
  std::vector<uint8_t> host; /* the tables as uploaded */
  size_t off[6] = {0, 0, 0, 0, 0, 0};
  /* Two-pass fallback (th == 0): strips, source columns read (antialias), intermediate. */
  std::vector<Strip> strips;
  int col0 = 0, n_cols = 0;
  void *inter = nullptr;
  size_t inter_size = 0;

  ~Slot ()
  {
    if (dev)
      cudaFree (dev);
    if (inter)
      cudaFree (inter);
  }
};

CudaPrep::CudaPrep (int max_views)
{
  for (int i = 0; i < max_views; i++)
    slots_.emplace_back (new Slot);
}

CudaPrep::~CudaPrep () = default;

static bool
same_params (const Params &a, const Params &b)
{
  return a.out_width == b.out_width && a.out_height == b.out_height && a.resize == b.resize &&
         a.filter == b.filter;
}

template <typename T>
static size_t
append (std::vector<uint8_t> &buf, const std::vector<T> &v)
{
  size_t at = (buf.size () + 15) / 16 * 16;
  buf.resize (at + v.size () * sizeof (T));
  if (!v.empty ())
    std::memcpy (buf.data () + at, v.data (), v.size () * sizeof (T));
  return at;
}

cudaError_t
CudaPrep::run_view (const Params &p, int slot_index, const Image &img, void *out,
                    cudaStream_t stream)
{
  if (slot_index < 0 || slot_index >= static_cast<int> (slots_.size ()))
    return cudaErrorInvalidValue;
  Slot &s = *slots_[slot_index];

  DevParams dp{};
  dp.W = p.out_width;
  dp.H = p.out_height;
  dp.dtype = static_cast<int> (p.dtype);
  for (int c = 0; c < 3; c++) {
    dp.mean[c] = p.mean[c];
    dp.std[c] = p.std[c];
  }
  dp.valid = img.planes[0] != nullptr;

  const dim3 block (kTileW, kThreadsY);
  if (!dp.valid) {
    const dim3 grid ((p.out_width + kTileW - 1) / kTileW,
                     (p.out_height + kThreadsY - 1) / kThreadsY);
    DevImage none{};
    bilinear_kernel<<<grid, block, 0, stream>>> (none, dp, nullptr, nullptr, nullptr, nullptr,
                                                 nullptr, nullptr, out);
    return cudaGetLastError ();
  }

  if (!s.have || s.in_w != img.width || s.in_h != img.height || !same_params (s.params, p)) {
    s.have = false;
    s.g = compute_geometry (p, img.width, img.height);
    s.host.clear ();
    if (p.filter != Filter::Bilinear) {
      AxisWeights hw = antialias_weights (img.width, s.g.box_x0, s.g.box_x1, s.g.dst_w,
                                          axis_bits (p.filter, s.g.box_x0, s.g.box_x1, s.g.dst_w));
      AxisWeights vw = antialias_weights (img.height, s.g.box_y0, s.g.box_y1, s.g.dst_h,
                                          axis_bits (p.filter, s.g.box_y0, s.g.box_y1, s.g.dst_h));
      s.hk = hw.ksize;
      s.vk = vw.ksize;
      s.hbits = hw.bits;
      s.vbits = vw.bits;
      s.off[0] = append (s.host, hw.first);
      s.off[1] = append (s.host, hw.count);
      s.off[2] = append (s.host, hw.coeffs);
      s.off[3] = append (s.host, vw.first);
      s.off[4] = append (s.host, vw.count);
      s.off[5] = append (s.host, vw.coeffs);
      s.th = 0;
      if (p.filter == Filter::Pil) {
        /* Largest tile height whose source rows fit in shared memory. */
        for (int th = 16; th >= 1 && s.th == 0; th /= 2) {
          int rows = 0;
          for (int r0 = -((s.g.dst_y % th)); r0 < s.g.dst_h; r0 += th) {
            int lo = std::max (r0, 0), hi = std::min (r0 + th, s.g.dst_h);
            if (lo < hi)
              rows = std::max (rows, vw.first[hi - 1] + vw.count[hi - 1] - vw.first[lo]);
          }
          if (static_cast<size_t> (rows) * kTileW * 3 <= kMaxShared) {
            s.th = th;
            s.shared = static_cast<size_t> (rows) * kTileW * 3;
          }
        }
      } else {
        /* Widest span of source columns one 32-column tile reads. */
        int cols = 1;
        for (int c0 = -(s.g.dst_x % kTileW); c0 < s.g.dst_w; c0 += kTileW) {
          int lo = std::max (c0, 0), hi = std::min (c0 + kTileW, s.g.dst_w);
          if (lo < hi)
            cols = std::max (cols, hw.first[hi - 1] + hw.count[hi - 1] - hw.first[lo]);
        }
        s.max_cols = cols;
        for (int th = 16; th >= 1 && s.th == 0; th /= 2)
          if (static_cast<size_t> (th) * cols * 3 <= kMaxShared) {
            s.th = th;
            s.shared = static_cast<size_t> (th) * cols * 3;
          }
      }
      s.strips.clear ();
      if (s.th == 0) {
        /* Too long a filter for the shared-memory tiles: the two-pass fallback, in strips of
         * output rows whose intermediate fits kMaxIntermediate. */
        const int dh = s.g.dst_h;
        size_t need = 0;
        if (p.filter == Filter::Pil) {
          const size_t row_bytes = static_cast<size_t> (s.g.dst_w) * 3;
          /* source rows of rect rows [a, b) */
          auto span = [&] (int a, int b) {
            return vw.first[b - 1] + vw.count[b - 1] - vw.first[a];
          };
          for (int r0 = 0; r0 < dh;) {
            int r1 = r0 + 1;
            while (r1 < dh &&
                   static_cast<size_t> (span (r0, r1 + 1)) * row_bytes <= kMaxIntermediate)
              r1++;
            s.strips.push_back ({r0, r1, vw.first[r0], span (r0, r1)});
            need = std::max (need, static_cast<size_t> (span (r0, r1)) * row_bytes);
            r0 = r1;
          }
        } else {
          s.col0 = hw.first[0];
          s.n_cols = hw.first[s.g.dst_w - 1] + hw.count[s.g.dst_w - 1] - s.col0;
          const size_t row_bytes = static_cast<size_t> (s.n_cols) * 3;
          const int per = static_cast<int> (
              std::max<size_t> (1, std::min<size_t> (kMaxIntermediate / row_bytes, dh)));
          for (int r0 = 0; r0 < dh; r0 += per)
            s.strips.push_back ({r0, std::min (r0 + per, dh), 0, 0});
          need = static_cast<size_t> (per) * row_bytes;
        }
        if (s.inter_size < need) {
          if (s.inter)
            cudaFree (s.inter);
          s.inter = nullptr;
          s.inter_size = 0;
          cudaError_t err = cudaMalloc (&s.inter, need);
          if (err != cudaSuccess)
            return err;
          s.inter_size = need;
        }
      }
    } else {
      AxisTaps ht = bilinear_taps (img.width, s.g.box_x0, s.g.box_x1, s.g.dst_w);
      AxisTaps vt = bilinear_taps (img.height, s.g.box_y0, s.g.box_y1, s.g.dst_h);
      s.off[0] = append (s.host, ht.i0);
      s.off[1] = append (s.host, ht.i1);
      s.off[2] = append (s.host, ht.lambda);
      s.off[3] = append (s.host, vt.i0);
      s.off[4] = append (s.host, vt.i1);
      s.off[5] = append (s.host, vt.lambda);
    }
    if (s.dev_size < s.host.size ()) {
      if (s.dev)
        cudaFree (s.dev);
      s.dev = nullptr;
      s.dev_size = 0;
      cudaError_t err = cudaMalloc (&s.dev, s.host.size ());
      if (err != cudaSuccess)
        return err;
      s.dev_size = s.host.size ();
    }
    /* Pageable source: the call returns once the data is staged, so s.host may change later. */
    cudaError_t err =
        cudaMemcpyAsync (s.dev, s.host.data (), s.host.size (), cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess)
      return err;
    s.in_w = img.width;
    s.in_h = img.height;
    s.params = p;
    s.have = true;
  }

  dp.dst_x = s.g.dst_x;
  dp.dst_y = s.g.dst_y;
  dp.dst_w = s.g.dst_w;
  dp.dst_h = s.g.dst_h;

  DevImage di{};
  di.format = static_cast<int> (img.format);
  di.width = img.width;
  di.height = img.height;
  for (int pl = 0; pl < 3; pl++) {
    di.planes[pl] = img.planes[pl];
    di.strides[pl] = img.strides[pl];
  }
  di.bpp = format_pixel_stride (img.format);
  di.yuv = img.yuv;
  {
    static const int table[][3] = {
        {0, 1, 2}, {2, 1, 0}, {0, 1, 2}, {2, 1, 0}, {1, 2, 3}, {3, 2, 1},
        {0, 1, 2}, {2, 1, 0}, {1, 2, 3}, {3, 2, 1}, {0, 0, 0},
    };
    int fi = std::min (static_cast<int> (img.format), static_cast<int> (Format::GRAY8));
    std::memcpy (di.off, table[fi], sizeof (di.off));
  }

  const uint8_t *d = static_cast<const uint8_t *> (s.dev);
  const int *ip[6];
  for (int i = 0; i < 6; i++)
    ip[i] = reinterpret_cast<const int *> (d + s.off[i]);
  if (p.filter != Filter::Bilinear && s.th == 0) {
    /* Two-pass fallback: the pad value everywhere first, then the rect strip by strip (all on
     * this stream, so in order). */
    DevParams pad = dp;
    pad.valid = 0;
    const dim3 grid ((p.out_width + kTileW - 1) / kTileW,
                     (p.out_height + kThreadsY - 1) / kThreadsY);
    DevImage none{};
    bilinear_kernel<<<grid, block, 0, stream>>> (none, pad, nullptr, nullptr, nullptr, nullptr,
                                                 nullptr, nullptr, out);
    uint8_t *tmp = static_cast<uint8_t *> (s.inter);
    const size_t dw = static_cast<size_t> (s.g.dst_w);
    for (const Strip &st : s.strips) {
      const size_t n_out = static_cast<size_t> (st.r1 - st.r0) * dw;
      if (p.filter == Filter::Pil) {
        pil_rows_kernel<<<fallback_blocks (st.n_src * dw), kFallbackThreads, 0, stream>>> (
            di, st.src0, st.n_src, s.g.dst_w, ip[0], ip[1], ip[2], s.hk, s.hbits, tmp);
        pil_cols_kernel<<<fallback_blocks (n_out), kFallbackThreads, 0, stream>>> (
            dp, st.r0, st.r1, st.src0, ip[3], ip[4], ip[5], s.vk, s.vbits, tmp, out);
      } else {
        antialias_rows_kernel<<<fallback_blocks (static_cast<size_t> (st.r1 - st.r0) * s.n_cols),
                                kFallbackThreads, 0, stream>>> (
            di, st.r0, st.r1 - st.r0, s.col0, s.n_cols, ip[3], ip[4], ip[5], s.vk, s.vbits, tmp);
        antialias_cols_kernel<<<fallback_blocks (n_out), kFallbackThreads, 0, stream>>> (
            dp, st.r0, st.r1, s.col0, s.n_cols, ip[0], ip[1], ip[2], s.hk, s.hbits, tmp, out);
      }
      cudaError_t err = cudaGetLastError ();
      if (err != cudaSuccess)
        return err;
    }
  } else if (p.filter == Filter::Pil) {
    const dim3 grid ((p.out_width + kTileW - 1) / kTileW, (p.out_height + s.th - 1) / s.th);
    pil_kernel<<<grid, block, s.shared, stream>>> (di, dp, s.th, ip[0], ip[1], ip[2], s.hk, ip[3],
                                                   ip[4], ip[5], s.vk, out);
  } else if (p.filter == Filter::Antialias) {
    const dim3 grid ((p.out_width + kTileW - 1) / kTileW, (p.out_height + s.th - 1) / s.th);
    antialias_kernel<<<grid, block, s.shared, stream>>> (di, dp, s.th, s.max_cols, ip[0], ip[1],
                                                         ip[2], s.hk, s.hbits, ip[3], ip[4], ip[5],
                                                         s.vk, s.vbits, out);
  } else {
    const dim3 grid ((p.out_width + kTileW - 1) / kTileW,
                     (p.out_height + kThreadsY - 1) / kThreadsY);
    bilinear_kernel<<<grid, block, 0, stream>>> (
        di, dp, reinterpret_cast<const int *> (d + s.off[0]),
        reinterpret_cast<const int *> (d + s.off[1]),
        reinterpret_cast<const float *> (d + s.off[2]),
        reinterpret_cast<const int *> (d + s.off[3]), reinterpret_cast<const int *> (d + s.off[4]),
        reinterpret_cast<const float *> (d + s.off[5]), out);
  }
  return cudaGetLastError ();
}

cudaError_t
prep_cuda (const Params &p, const Image *views, int n_views, void *out, const cudaStream_t *streams,
           CudaPrep &prep)
{
  for (int v = 0; v < n_views; v++) {
    cudaError_t err = prep.run_view (p, v, views[v],
                                     static_cast<uint8_t *> (out) + v * view_bytes (p), streams[v]);
    if (err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}

/* ---- CudaRunner ---- */

namespace
{

void *
device_alloc (size_t n)
{
  void *p = nullptr;
  return cudaMalloc (&p, n) == cudaSuccess ? p : nullptr;
}

void
device_free (void *p)
{
  cudaFree (p);
}

void
destroy_event (void *e)
{
  cudaEventDestroy (static_cast<cudaEvent_t> (e));
}

} // namespace

CudaRunner::~CudaRunner ()
{
  synchronize ();
  close ();
}

cudaError_t
CudaRunner::init (int device, int max_views, const char **what)
{
  cudaError_t err;
  device_ = device;
  *what = "selecting the device";
  if ((err = cudaSetDevice (device)) != cudaSuccess)
    return err;
  prep_ = std::make_unique<CudaPrep> (max_views);
  views_.clear ();
  for (int v = 0; v < max_views; v++) {
    auto cv = std::make_unique<View> ();
    *what = "creating a stream";
    if ((err = cv->stream.create ()) != cudaSuccess)
      return err;
    *what = "creating an event";
    if ((err = cv->done.create ()) != cudaSuccess || (err = cv->upload_done.create ()) != cudaSuccess)
      return err;
    views_.push_back (std::move (cv));
  }
  pool_ = BlockPool::make (device_alloc, device_free);
  return cudaSuccess;
}

BlockPool::Block *
CudaRunner::run (const Params &p, const Image *views, const bool *in_device, int n,
                 cudaError_t *err, const char **what)
{
  const size_t vb = view_bytes (p);
  BlockPool::Block *blk = n > 0 && n <= (int)views_.size () ? pool_->acquire (vb * n) : nullptr;
  auto fail = [&] (const char *doing, cudaError_t e) -> BlockPool::Block * {
    *what = doing;
    *err = e;
    if (blk)
      BlockPool::release (blk);
    return nullptr;
  };
  if (!blk)
    return fail (n > (int)views_.size () ? "running more views than were set up"
                                         : "allocating the output",
                 n > (int)views_.size () ? cudaErrorInvalidValue : cudaErrorMemoryAllocation);
  cudaEvent_t out_event = nullptr;
  cudaError_t e = cudaEventCreateWithFlags (&out_event, cudaEventDisableTiming);
  if (e != cudaSuccess)
    return fail ("creating the output event", e);
  blk->event = out_event;
  blk->destroy_event = destroy_event;

  for (int v = 0; v < n; v++) {
    View &cv = *views_[v];
    Image im = views[v];
    if (im.planes[0] && !in_device[v]) {
      /* Host memory: each plane into pinned staging, uploaded on this view's stream. */
      const int np = format_n_planes (im.format);
      size_t offs[3], total = 0;
      for (int pl = 0; pl < np; pl++) {
        offs[pl] = total;
        total += (plane_span (im.format, im.height, pl, im.strides[pl]) + 255) / 256 * 256;
      }
      if ((e = cudaEventSynchronize (cv.upload_done.get ())) != cudaSuccess)
        return fail ("waiting for the previous upload", e);
      if ((e = cv.staging.ensure (total)) != cudaSuccess)
        return fail ("allocating pinned staging memory", e);
      if ((e = cv.input.ensure (total)) != cudaSuccess)
        return fail ("allocating device input memory", e);
      for (int pl = 0; pl < np; pl++) {
        std::memcpy (cv.staging.data () + offs[pl], im.planes[pl],
                     plane_span (im.format, im.height, pl, im.strides[pl]));
        im.planes[pl] = cv.input.data () + offs[pl];
      }
      if ((e = cudaMemcpyAsync (cv.input.data (), cv.staging.data (), total,
                                cudaMemcpyHostToDevice, cv.stream.get ())) != cudaSuccess)
        return fail ("uploading a frame", e);
      if ((e = cudaEventRecord (cv.upload_done.get (), cv.stream.get ())) != cudaSuccess)
        return fail ("recording an event", e);
    }
    if ((e = prep_->run_view (p, v, im, static_cast<uint8_t *> (blk->data) + v * vb,
                              cv.stream.get ())) != cudaSuccess)
      return fail ("running the preprocessing kernel", e);
    if ((e = cudaEventRecord (cv.done.get (), cv.stream.get ())) != cudaSuccess)
      return fail ("recording an event", e);
  }
  /* One event for the whole tensor: view 0's stream waits for the others on the GPU. */
  cudaStream_t s0 = views_[0]->stream.get ();
  for (int v = 1; v < n; v++)
    if ((e = cudaStreamWaitEvent (s0, views_[v]->done.get (), 0)) != cudaSuccess)
      return fail ("joining the view streams", e);
  if ((e = cudaEventRecord (out_event, s0)) != cudaSuccess)
    return fail ("recording the output event", e);
  *err = cudaSuccess;
  return blk;
}

void
CudaRunner::synchronize ()
{
  for (auto &v : views_)
    cudaStreamSynchronize (v->stream.get ());
}

/* ---- PrimaryContext ---- */

namespace
{

/* The two driver entry points, from libcuda.so.1 when there is one. */
struct DriverApi {
  int (*primary_retain) (void **ctx, int dev) = nullptr;
  int (*primary_release) (int dev) = nullptr;
  bool ok = false;

  static const DriverApi &get ()
  {
    static DriverApi api;
    static std::once_flag once;
    std::call_once (once, [] {
      void *lib = dlopen ("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib)
        return;
      api.primary_retain =
          reinterpret_cast<int (*) (void **, int)> (dlsym (lib, "cuDevicePrimaryCtxRetain"));
      api.primary_release =
          reinterpret_cast<int (*) (int)> (dlsym (lib, "cuDevicePrimaryCtxRelease_v2"));
      if (!api.primary_release)
        api.primary_release =
            reinterpret_cast<int (*) (int)> (dlsym (lib, "cuDevicePrimaryCtxRelease"));
      api.ok = api.primary_retain && api.primary_release;
    });
    return api;
  }
};

} // namespace

bool
PrimaryContext::retain (int device)
{
  reset ();
  const DriverApi &drv = DriverApi::get ();
  if (!drv.ok || drv.primary_retain (&ctx_, device) != 0) {
    ctx_ = nullptr;
    return false;
  }
  device_ = device;
  return true;
}

void
PrimaryContext::reset ()
{
  if (ctx_)
    DriverApi::get ().primary_release (device_);
  ctx_ = nullptr;
}

} // namespace pi0::prep
