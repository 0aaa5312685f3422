/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The CPU path of pi0prep and what it shares with the CUDA path (geometry, weights). */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "kernels/pi0prep.h"
#include "kernels/pi0prepyuv.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pi0::prep
{

const char *
format_name (Format f)
{
  switch (f) {
    case Format::RGB:
      return "RGB";
    case Format::BGR:
      return "BGR";
    case Format::RGBx:
      return "RGBx";
    case Format::BGRx:
      return "BGRx";
    case Format::xRGB:
      return "xRGB";
    case Format::xBGR:
      return "xBGR";
    case Format::RGBA:
      return "RGBA";
    case Format::BGRA:
      return "BGRA";
    case Format::ARGB:
      return "ARGB";
    case Format::ABGR:
      return "ABGR";
    case Format::GRAY8:
      return "GRAY8";
    case Format::NV12:
      return "NV12";
    case Format::I420:
      return "I420";
    case Format::NV21:
      return "NV21";
    case Format::YV12:
      return "YV12";
    case Format::Y42B:
      return "Y42B";
    case Format::Y444:
      return "Y444";
    case Format::YUY2:
      return "YUY2";
    case Format::UYVY:
      return "UYVY";
  }
  return "?";
}

bool
format_from_name (const char *name, Format *out)
{
  for (Format f : kFormats) {
    if (name && std::strcmp (name, format_name (f)) == 0) {
      *out = f;
      return true;
    }
  }
  return false;
}

std::string
format_list ()
{
  std::string s;
  for (Format f : kFormats)
    s += std::string (s.empty () ? "" : ", ") + format_name (f);
  return s;
}

std::shared_ptr<BlockPool>
BlockPool::make (Alloc alloc, Free free)
{
  return std::shared_ptr<BlockPool> (new BlockPool (alloc, free));
}

std::shared_ptr<BlockPool>
BlockPool::host ()
{
  return make ([] (size_t n) { return std::aligned_alloc (64, (n + 63) / 64 * 64); }, std::free);
}

BlockPool::~BlockPool ()
{
  for (void *b : free_blocks_)
    free_ (b);
}

BlockPool::Block *
BlockPool::acquire (size_t size)
{
  void *data = nullptr;
  {
    std::lock_guard<std::mutex> lk (lock_);
    if (size_ != size) {
      for (void *b : free_blocks_)
        free_ (b);
      free_blocks_.clear ();
      size_ = size;
    }
    if (!free_blocks_.empty ()) {
      data = free_blocks_.back ();
      free_blocks_.pop_back ();
    }
  }
  if (!data)
    data = alloc_ (size);
  if (!data)
    return nullptr;
  Block *b = new Block;
  b->pool = shared_from_this ();
  b->data = data;
  b->size = size;
  return b;
}

void
BlockPool::release (void *p)
{
  Block *b = static_cast<Block *> (p);
  BlockPool &pool = *b->pool;
  {
    std::lock_guard<std::mutex> lk (pool.lock_);
    if (!pool.closed_ && b->size == pool.size_) {
      pool.free_blocks_.push_back (b->data);
      b->data = nullptr;
    }
  }
  if (b->data)
    pool.free_ (b->data);
  if (b->event && b->destroy_event)
    b->destroy_event (b->event);
  delete b;
}

void
BlockPool::close ()
{
  std::lock_guard<std::mutex> lk (lock_);
  closed_ = true;
}

int
format_n_planes (Format f)
{
  switch (f) {
    case Format::NV12:
    case Format::NV21:
      return 2;
    case Format::I420:
    case Format::YV12:
    case Format::Y42B:
    case Format::Y444:
      return 3;
    default:
      return 1;
  }
}

int
format_pixel_stride (Format f)
{
  if (format_is_yuv (f))
    return 0;
  switch (f) {
    case Format::RGB:
    case Format::BGR:
      return 3;
    case Format::GRAY8:
      return 1;
    default:
      return 4;
  }
}

/* Byte offsets of R, G, B inside a packed pixel. */
static void
rgb_offsets (Format f, int off[3])
{
  static const int table[][3] = {
      {0, 1, 2}, {2, 1, 0},                       /* RGB BGR */
      {0, 1, 2}, {2, 1, 0}, {1, 2, 3}, {3, 2, 1}, /* RGBx BGRx xRGB xBGR */
      {0, 1, 2}, {2, 1, 0}, {1, 2, 3}, {3, 2, 1}, /* RGBA BGRA ARGB ABGR */
      {0, 0, 0},                                  /* GRAY8 */
  };
  int i = static_cast<int> (f);
  if (i > static_cast<int> (Format::GRAY8))
    i = 0;
  std::memcpy (off, table[i], sizeof (table[i]));
}

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

size_t
dtype_size (DType d)
{
  return d == DType::Float32 ? 4 : 2;
}

size_t
view_bytes (const Params &p)
{
  return 3 * static_cast<size_t> (p.out_width) * static_cast<size_t> (p.out_height) *
         dtype_size (p.dtype);
}

static int
plane_rows (Format f, int height, int plane)
{
  const bool half = plane > 0 && f != Format::Y42B && f != Format::Y444;
  return half ? (height + 1) / 2 : height;
}

static size_t
plane_row_bytes (Format f, int width, int plane)
{
  const size_t w = static_cast<size_t> (width), pairs = (w + 1) / 2;
  switch (f) {
    case Format::NV12:
    case Format::NV21:
      return plane == 0 ? w : 2 * pairs;
    case Format::I420:
    case Format::YV12:
    case Format::Y42B:
      return plane == 0 ? w : pairs;
    case Format::Y444:
      return w;
    case Format::YUY2:
    case Format::UYVY:
      return 4 * pairs; /* an odd width still ends with a whole Y U Y V group */
    default:
      return w * format_pixel_stride (f);
  }
}

size_t
plane_span (Format f, int height, int plane, size_t stride)
{
  return stride * static_cast<size_t> (plane_rows (f, height, plane));
}

std::string
validate (const Params &p, const Image &img)
{
  if (p.out_width <= 0 || p.out_height <= 0)
    return "output size must be positive";
  for (int c = 0; c < 3; c++)
    if (!(p.std[c] > 0.f) || !std::isfinite (p.mean[c]))
      return "std must be > 0 and mean finite";
  if (!img.planes[0])
    return {}; /* masked view: nothing is read */
  if (img.width <= 0 || img.height <= 0)
    return "frame size must be positive";
  if (img.width > kMaxFrameSide || img.height > kMaxFrameSide)
    return std::string ("frame ") + std::to_string (img.width) + "x" + std::to_string (img.height) +
           " is larger than the " + std::to_string (kMaxFrameSide) + " pixels per side supported";
  for (int pl = 0; pl < format_n_planes (img.format); pl++) {
    if (!img.planes[pl])
      return std::string ("plane ") + std::to_string (pl) + " missing";
    if (img.strides[pl] < plane_row_bytes (img.format, img.width, pl))
      return std::string ("stride ") + std::to_string (img.strides[pl]) + " of plane " +
             std::to_string (pl) + " is shorter than a row of " +
             std::to_string (plane_row_bytes (img.format, img.width, pl)) + " bytes";
  }
  return {};
}

Geometry
compute_geometry (const Params &p, int in_w, int in_h)
{
  Geometry g;
  const int W = p.out_width, H = p.out_height;
  switch (p.resize) {
    case Resize::Pad: {
      /* openpi: ratio = max(w/W, h/H); size = int(h/ratio), int(w/ratio) (Python floats). */
      double ratio = std::max (static_cast<double> (in_w) / W, static_cast<double> (in_h) / H);
      int rw = static_cast<int> (in_w / ratio), rh = static_cast<int> (in_h / ratio);
      rw = std::clamp (rw, 1, W);
      rh = std::clamp (rh, 1, H);
      g.dst_w = rw;
      g.dst_h = rh;
      g.dst_x = std::max (0, static_cast<int> ((W - rw) / 2.0));
      g.dst_y = std::max (0, static_cast<int> ((H - rh) / 2.0));
      g.box_x1 = in_w;
      g.box_y1 = in_h;
      break;
    }
    case Resize::Stretch:
      g.dst_w = W;
      g.dst_h = H;
      g.box_x1 = in_w;
      g.box_y1 = in_h;
      break;
    case Resize::Crop: {
      double ratio = std::min (static_cast<double> (in_w) / W, static_cast<double> (in_h) / H);
      double bw = std::min<double> (in_w, W * ratio), bh = std::min<double> (in_h, H * ratio);
      g.dst_w = W;
      g.dst_h = H;
      /* PIL keeps the box in C floats; doing the same keeps crop reproducible with PIL. */
      g.box_x0 = static_cast<float> ((in_w - bw) / 2.0);
      g.box_y0 = static_cast<float> ((in_h - bh) / 2.0);
      g.box_x1 = static_cast<float> (g.box_x0 + bw);
      g.box_y1 = static_cast<float> (g.box_y0 + bh);
      break;
    }
  }
  return g;
}

int
filter_taps (double in0, double in1, int out_size)
{
  const double support = std::max ((in1 - in0) / out_size, 1.0);
  return static_cast<int> (std::ceil (support)) * 2 + 1;
}

int
axis_bits (Filter f, double in0, double in1, int out_size)
{
  if (f == Filter::Antialias && filter_taps (in0, in1, out_size) <= kFastMaxTaps)
    return kFastBits;
  return kPrecisionBits;
}

AxisWeights
antialias_weights (int in_size, double in0, double in1, int out_size, int bits)
{
  /* PIL's precompute_coeffs + normalize_coeffs_8bpc for the bilinear (triangle) filter. */
  AxisWeights a;
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max (scale, 1.0);
  const double support = 1.0 * filterscale;
  a.out_size = out_size;
  a.bits = bits;
  a.ksize = filter_taps (in0, in1, out_size);
  a.first.resize (out_size);
  a.count.resize (out_size);
  a.coeffs.assign (static_cast<size_t> (out_size) * a.ksize, 0);
  std::vector<double> k (a.ksize);
  for (int xx = 0; xx < out_size; xx++) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int> (center - support + 0.5);
    if (xmin < 0)
      xmin = 0;
    int xmax = static_cast<int> (center + support + 0.5);
    if (xmax > in_size)
      xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      double t = std::fabs ((x + xmin - center + 0.5) * ss);
      double w = t < 1.0 ? 1.0 - t : 0.0;
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; x++) {
      double v = ww != 0.0 ? k[x] / ww : k[x];
      a.coeffs[static_cast<size_t> (xx) * a.ksize + x] =
          v < 0 ? static_cast<int32_t> (-0.5 + v * (1 << bits))
                : static_cast<int32_t> (0.5 + v * (1 << bits));
    }
    a.first[xx] = xmin;
    a.count[xx] = std::max (xmax, 0);
  }
  return a;
}

AxisTaps
bilinear_taps (int in_size, double in0, double in1, int out_size)
{
  /* ATen's area_pixel_compute_source_index (align_corners=False, linear): the source
   * coordinate is clamped at 0, the upper neighbour at in-1. */
  AxisTaps t;
  t.i0.resize (out_size);
  t.i1.resize (out_size);
  t.lambda.resize (out_size);
  const float scale = static_cast<float> ((in1 - in0) / out_size);
  for (int i = 0; i < out_size; i++) {
    float src = scale * (i + 0.5f) - 0.5f;
    if (src < 0.f)
      src = 0.f;
    src += static_cast<float> (in0);
    int i0 = std::min (static_cast<int> (src), in_size - 1);
    t.i0[i] = i0;
    t.i1[i] = std::min (i0 + 1, in_size - 1);
    t.lambda[i] = std::min (std::max (src - i0, 0.f), 1.f);
  }
  return t;
}

/* ------------------------------------------------------------------------------------------ */
/* Thread pool */

struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex lock;
  std::condition_variable wake, done;
  const std::function<void (int)> *fn = nullptr;
  int n_tasks = 0;
  std::atomic<int> next{0};
  int finished = 0; /* workers done with the current generation */
  uint64_t generation = 0;
  bool quit = false;

  /* fn and n_tasks are written under the lock before the generation is published and stay
   * put until every worker has reported back, so workers read them without the lock. */
  void work ()
  {
    for (int i; (i = next.fetch_add (1)) < n_tasks;)
      (*fn) (i);
  }
};

ThreadPool::ThreadPool (int n_threads) : impl_ (new Impl)
{
  Impl *d = impl_;
  for (int t = 1; t < std::max (1, n_threads); t++) {
    d->threads.emplace_back ([d] {
      uint64_t seen = 0;
      std::unique_lock<std::mutex> lk (d->lock);
      for (;;) {
        d->wake.wait (lk, [&] { return d->quit || d->generation != seen; });
        if (d->quit)
          return;
        seen = d->generation;
        lk.unlock ();
        d->work ();
        lk.lock ();
        /* Every worker checks in for every generation, so run() never returns while one is
         * still inside (or about to enter) work(). */
        if (++d->finished == static_cast<int> (d->threads.size ()))
          d->done.notify_all ();
      }
    });
  }
}

ThreadPool::~ThreadPool ()
{
  {
    std::lock_guard<std::mutex> lk (impl_->lock);
    impl_->quit = true;
  }
  impl_->wake.notify_all ();
  for (auto &t : impl_->threads)
    t.join ();
  delete impl_;
}

int
ThreadPool::size () const
{
  return static_cast<int> (impl_->threads.size ()) + 1;
}

void
ThreadPool::run (int n_tasks, const std::function<void (int)> &fn)
{
  Impl *d = impl_;
  {
    std::lock_guard<std::mutex> lk (d->lock);
    d->fn = &fn;
    d->n_tasks = n_tasks;
    d->next = 0;
    d->finished = 0;
    d->generation++;
  }
  d->wake.notify_all ();
  d->work ();
  std::unique_lock<std::mutex> lk (d->lock);
  d->done.wait (lk, [&] { return d->finished == static_cast<int> (d->threads.size ()); });
  d->fn = nullptr;
}

/* ------------------------------------------------------------------------------------------ */
/* CPU kernels */

namespace
{

inline uint8_t
clip8 (int32_t ss, int bits)
{
  if (ss >= (1 << bits << 8))
    return 255;
  if (ss <= 0)
    return 0;
  return static_cast<uint8_t> (ss >> bits);
}

/* floor (v + 0.5) clamped to 0..255, without a libm call (no SSE4.1 roundss on baseline x86-64). */
inline uint8_t
round8 (float v)
{
  const float f = v + 0.5f;
  if (!(f > 0.f))
    return 0;
  if (f >= 255.f)
    return 255;
  return static_cast<uint8_t> (static_cast<int> (f));
}

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

/* One row of YUV converted to packed RGB (filter=pil; scalar, like the rest of that path). */
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

/* One row of YUV converted to three planar rows (R, G, B), same arithmetic as above. Pairs of
 * pixels share a chroma sample, which keeps the loop free of per-pixel index math so that it
 * vectorizes. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define PI0_MULTIVERSION __attribute__ ((target_clones ("avx2", "default")))
#else
#define PI0_MULTIVERSION
#endif

/* Luma of pair i at Y[YSTEP * 2i] and Y[YSTEP * (2i + 1)], its chroma at U/V[CSTEP * i]. */
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

/* Horizontal pass weights laid out per output column over the bytes of B-byte pixels, padded
 * to a multiple of the accumulator block so the inner loop has a fixed length and vectorizes. */
struct HPlan {
  int bpp = 3, block = 24, len = 0, bits = kPrecisionBits;
  std::vector<int> start; /* first byte read, per output column */
  std::vector<int32_t> w; /* len weights per column */
  bool fits = true;       /* every column's window lies inside the row */
};

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

/* One input row -> three uint8 planes' rows (R, G, B) of the intermediate image. */
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

/* Plain per-tap loop: rows too narrow for the padded window (tiny images). */
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

/* out[i] = clip (sum_k w[k] * rows[k][i]) for i < len; w has kFastBits fractional bits. */
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

/* acc[i] += sum_k w[k] * rows[k][i] for i < len: the vertical pass of a filter too long for
 * vsum (more than kFastMaxTaps taps, 32-bit weights), a group of rows at a time. */
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

/* filter=antialias horizontal pass on one plane: int16 weights, windows padded to 16 taps. */
struct HPlan16 {
  int len = 16;
  std::vector<int> start;
  std::vector<int16_t> w;
  bool fits = true;
};

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

inline uint16_t
to_bf16 (float v)
{
  uint32_t u;
  std::memcpy (&u, &v, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t> (u >> 16);
}

inline uint16_t
to_f16 (float v)
{
  _Float16 h = static_cast<_Float16> (v);
  uint16_t u;
  std::memcpy (&u, &h, 2);
  return u;
}

/* Writes n floats to out (an element offset into the view) in the output dtype. */
void
store_row (const Params &p, void *out, size_t index, const float *v, int n)
{
  switch (p.dtype) {
    case DType::Float32:
      std::memcpy (static_cast<float *> (out) + index, v, n * sizeof (float));
      break;
    case DType::BFloat16: {
      uint16_t *o = static_cast<uint16_t *> (out) + index;
      for (int i = 0; i < n; i++)
        o[i] = to_bf16 (v[i]);
      break;
    }
    case DType::Float16: {
      uint16_t *o = static_cast<uint16_t *> (out) + index;
      for (int i = 0; i < n; i++)
        o[i] = to_f16 (v[i]);
      break;
    }
  }
}

/* normalize_value per channel: tabulated for the 256 levels of the uint8 filters, evaluated
 * directly for the float values of filter=bilinear. */
struct Norm {
  float lut[3][256];
  float mean[3], std[3];
  explicit Norm (const Params &p)
  {
    for (int c = 0; c < 3; c++) {
      mean[c] = p.mean[c];
      std[c] = p.std[c];
      for (int v = 0; v < 256; v++)
        lut[c][v] = normalize_value (static_cast<float> (v), mean[c], std[c]);
    }
  }
  float pad (int c) const { return lut[c][0]; }
  /* n uint8 values of channel c -> floats */
  void row (int c, const uint8_t *v, float *out, int n) const
  {
    const float *t = lut[c];
    for (int x = 0; x < n; x++)
      out[x] = t[v[x]];
  }
  /* n float values (0..255) of channel c, normalized in place */
  void floats (int c, float *v, int n) const
  {
    const float m = mean[c], s = std[c];
    for (int x = 0; x < n; x++)
      v[x] = normalize_value (v[x], m, s);
  }
};

/* Pad value over output rows [y0, y1) outside the resized rectangle (everything if !valid). */
void
fill_pad_rows (const Params &p, const Norm &nm, const Geometry &g, bool valid, void *out, int y0,
               int y1)
{
  const int W = p.out_width, H = p.out_height;
  std::vector<float> row (W);
  for (int c = 0; c < 3; c++) {
    std::fill (row.begin (), row.end (), nm.pad (c));
    for (int y = y0; y < y1; y++) {
      const size_t base = (static_cast<size_t> (c) * H + y) * W;
      const bool inside = valid && y >= g.dst_y && y < g.dst_y + g.dst_h;
      if (!inside) {
        store_row (p, out, base, row.data (), W);
      } else {
        store_row (p, out, base, row.data (), g.dst_x);
        const int right = g.dst_x + g.dst_w;
        store_row (p, out, base + right, row.data (), W - right);
      }
    }
  }
}

struct ViewJob {
  const Image *img = nullptr;
  const Norm *norm = nullptr;
  Geometry g;
  AxisWeights hw, vw;
  std::vector<int16_t> vw16; /* filter=antialias: vertical weights as int16 */
  HPlan16 hp16;              /* filter=antialias: horizontal pass per plane */
  HPlan hp;
  AxisTaps ht, vt;
  void *out = nullptr;
};

/* Output rows [r0, r1) of the resized rectangle (rows relative to it), filter=pil. */
void
pil_band (const Params &p, const ViewJob &job, int r0, int r1)
{
  const Image &img = *job.img;
  const Geometry &g = job.g;
  const int nw = g.dst_w;
  const int src_first = job.vw.first[r0];
  const int src_last = job.vw.first[r1 - 1] + job.vw.count[r1 - 1];
  const int n_rows = std::max (0, src_last - src_first);
  const bool yuv = format_is_yuv (img.format);
  const int bpp = yuv ? 3 : format_pixel_stride (img.format);
  int off[3];
  if (yuv) {
    off[0] = 0;
    off[1] = 1;
    off[2] = 2;
  } else {
    rgb_offsets (img.format, off);
  }

  thread_local std::vector<uint8_t> tmp, rgbrow;
  thread_local std::vector<float> frow;
  const size_t plane = static_cast<size_t> (n_rows) * nw;
  if (tmp.size () < 3 * plane)
    tmp.resize (3 * plane);
  if (yuv && rgbrow.size () < static_cast<size_t> (img.width) * 3)
    rgbrow.resize (static_cast<size_t> (img.width) * 3);
  uint8_t *tr = tmp.data (), *tg = tr + plane, *tb = tg + plane;

  for (int i = 0; i < n_rows; i++) {
    const int y = src_first + i;
    const uint8_t *row;
    if (yuv) {
      yuv_row_to_rgb (img, y, rgbrow.data ());
      row = rgbrow.data ();
    } else {
      row = img.planes[0] + img.strides[0] * y;
    }
    uint8_t *r = tr + static_cast<size_t> (i) * nw, *gg = tg + static_cast<size_t> (i) * nw,
            *b = tb + static_cast<size_t> (i) * nw;
    if (!job.hp.fits)
      hpass_row_scalar (row, job.hw, bpp, off, r, gg, b);
    else if (bpp == 3)
      hpass_row_3 (row, job.hp, nw, off, r, gg, b);
    else if (bpp == 4)
      hpass_row_4 (row, job.hp, nw, off, r, gg, b);
    else {
      hpass_row_1 (row, job.hp, nw, r);
      std::memcpy (gg, r, nw);
      std::memcpy (b, r, nw);
    }
  }

  const Norm &nm = *job.norm;
  const int W = p.out_width, H = p.out_height;
  if (frow.size () < static_cast<size_t> (nw))
    frow.resize (nw);
  uint8_t line[4096];
  std::vector<uint8_t> big;
  uint8_t *ln = line;
  if (nw > 4096) {
    big.resize (nw);
    ln = big.data ();
  }
  const uint8_t *planes[3] = {tr, tg, tb};
  for (int r = r0; r < r1; r++) {
    const int32_t *w = job.vw.coeffs.data () + static_cast<size_t> (r) * job.vw.ksize;
    for (int c = 0; c < 3; c++) {
      vpass_row (planes[c] + static_cast<size_t> (job.vw.first[r] - src_first) * nw, nw, nw, w,
                 job.vw.count[r], ln, job.vw.bits);
      nm.row (c, ln, frow.data (), nw);
      const size_t base = (static_cast<size_t> (c) * H + g.dst_y + r) * W + g.dst_x;
      store_row (p, job.out, base, frow.data (), nw);
    }
  }
}

/* Byte planes of packed 3- or 4-byte pixels: plane o holds byte o of every pixel in [x0, x1). */
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

/* Output rows [r0, r1) of the resized rectangle, filter=antialias (vertical pass first). */
void
antialias_band (const Params &p, const ViewJob &job, int r0, int r1)
{
  const Image &img = *job.img;
  const Geometry &g = job.g;
  const int nw = g.dst_w, W = p.out_width, H = p.out_height;
  const bool yuv = format_is_yuv (img.format);
  const int bpp = yuv ? 3 : format_pixel_stride (img.format);
  int off[3];
  if (yuv) {
    off[0] = 0;
    off[1] = 1;
    off[2] = 2;
  } else {
    rgb_offsets (img.format, off);
  }
  /* Only the source columns some output column reads (packed input). YUV is converted to
   * planar R, G, B rows, filtered as one 3*width row, then horizontally per plane. */
  const int x_lo = yuv ? 0 : job.hw.first[0];
  const int x_hi = yuv ? 3 * img.width : job.hw.first[nw - 1] + job.hw.count[nw - 1];
  const int vbpp = yuv ? 1 : bpp;
  const size_t row_bytes = static_cast<size_t> (img.width) * bpp;

  thread_local std::vector<uint8_t> line, ring, planes, deint;
  thread_local std::vector<int> tags;
  thread_local std::vector<float> frow;
  if (line.size () < row_bytes + 64)
    line.resize (row_bytes + 64);
  if (planes.size () < 3 * static_cast<size_t> (nw))
    planes.resize (3 * static_cast<size_t> (nw));
  if (frow.size () < static_cast<size_t> (nw))
    frow.resize (nw);
  /* A vertical filter longer than kFastMaxTaps (22-bit weights) is summed in 32 bits, kGroup
   * source rows at a time, so that the converted YUV rows held stay bounded whatever the
   * downscale (all of a window's rows at once would be ~200 MB for 8K -> 1 pixel). */
  constexpr int kGroup = 64;
  const bool long_v = job.vw.bits != kFastBits;
  const int len = (x_hi - x_lo) * vbpp;
  uint8_t *const vout = line.data () + static_cast<size_t> (x_lo) * vbpp;
  thread_local std::vector<int32_t> acc;
  if (long_v && acc.size () < static_cast<size_t> (len))
    acc.resize (len);
  /* Converted YUV rows. Short filters keep them while the vertical windows (which only move
   * down) still need them, so each source row is converted once per band; long filters
   * convert each group of rows as they sum it. */
  const int n_slots = long_v ? kGroup : job.vw.ksize + 1;
  if (yuv) {
    if (ring.size () < row_bytes * n_slots)
      ring.resize (row_bytes * n_slots);
    tags.assign (n_slots, -1);
  }
  auto source_row = [&] (int y, int slot) -> const uint8_t * {
    if (!yuv)
      return img.planes[0] + img.strides[0] * y + static_cast<size_t> (x_lo) * bpp;
    uint8_t *dst = ring.data () + row_bytes * slot;
    if (tags[slot] != y) {
      yuv_row_to_planar (img, y, dst, dst + img.width, dst + 2 * img.width);
      tags[slot] = y;
    }
    return dst;
  };
  const Norm &nm = *job.norm;
  uint8_t *pr = planes.data (), *pg = pr + nw, *pb = pg + nw;
  std::vector<const uint8_t *> rows (long_v ? kGroup : job.vw.ksize);
  for (int r = r0; r < r1; r++) {
    const int n = job.vw.count[r], y0 = job.vw.first[r];
    if (!long_v) {
      for (int k = 0; k < n; k++)
        rows[k] = source_row (y0 + k, (y0 + k) % n_slots);
      vsum (rows.data (), job.vw16.data () + static_cast<size_t> (r) * job.vw.ksize, n, len, vout,
            job.vw.bits);
    } else {
      const int32_t *w = job.vw.coeffs.data () + static_cast<size_t> (r) * job.vw.ksize;
      std::fill (acc.begin (), acc.begin () + len, 1 << (job.vw.bits - 1));
      for (int k0 = 0; k0 < n; k0 += kGroup) {
        const int m = std::min (kGroup, n - k0);
        for (int k = 0; k < m; k++)
          rows[k] = source_row (y0 + k0 + k, k);
        vacc32 (rows.data (), w + k0, m, len, acc.data ());
      }
      for (int i = 0; i < len; i++)
        vout[i] = clip8 (acc[i], job.vw.bits);
    }
    /* Planes of the vertically filtered row (YUV rows are planar already), then the
     * horizontal pass on each. */
    const uint8_t *pl[3];
    if (yuv) {
      for (int c = 0; c < 3; c++)
        pl[c] = line.data () + static_cast<size_t> (c) * img.width;
    } else if (bpp == 1) {
      pl[0] = pl[1] = pl[2] = line.data ();
    } else {
      if (deint.size () < 4 * static_cast<size_t> (img.width))
        deint.resize (4 * static_cast<size_t> (img.width));
      uint8_t *bp[4];
      for (int o = 0; o < 4; o++)
        bp[o] = deint.data () + static_cast<size_t> (o) * img.width;
      byte_planes (line.data (), bpp, x_lo, x_hi, bp);
      for (int c = 0; c < 3; c++)
        pl[c] = bp[off[c]];
    }
    uint8_t *dst[3] = {pr, pg, pb};
    for (int c = 0; c < 3; c++) {
      if (c > 0 && pl[c] == pl[0]) {
        std::memcpy (dst[c], dst[0], nw);
      } else if (job.hp16.fits) {
        hpass16 (pl[c], job.hp16, nw, dst[c], job.hw.bits);
      } else {
        const int o1[3] = {0, 0, 0};
        std::vector<uint8_t> scratch (2 * static_cast<size_t> (nw));
        hpass_row_scalar (pl[c], job.hw, 1, o1, dst[c], scratch.data (), scratch.data () + nw);
      }
    }
    const uint8_t *src[3] = {pr, pg, pb};
    for (int c = 0; c < 3; c++) {
      nm.row (c, src[c], frow.data (), nw);
      store_row (p, job.out, (static_cast<size_t> (c) * H + g.dst_y + r) * W + g.dst_x,
                 frow.data (), nw);
    }
  }
}

/* RGB of one source pixel as floats (YUV converted and rounded as in the antialias path). */
inline void
fetch_rgb (const Image &img, const int off[3], int x, int y, float rgb[3])
{
  if (format_is_yuv (img.format)) {
    const YuvMatrix &m = img.yuv;
    const YuvRow row = yuv_row (img.format, img.planes, img.strides, y);
    const int c = (x >> row.cshift) * row.cstep;
    const float yy = m.ys * (row.y[x * row.ystep] - m.y_offset);
    const float u = row.u[c] - 128.f, v = row.v[c] - 128.f;
    rgb[0] = round8 (yy + m.rv * v);
    rgb[1] = round8 (yy - m.gu * u - m.gv * v);
    rgb[2] = round8 (yy + m.bu * u);
    return;
  }
  const uint8_t *px = img.planes[0] + img.strides[0] * y +
                      static_cast<size_t> (x) * format_pixel_stride (img.format);
  for (int c = 0; c < 3; c++)
    rgb[c] = px[off[c]];
}

void
bilinear_band (const Params &p, const ViewJob &job, int r0, int r1)
{
  const Image &img = *job.img;
  const Geometry &g = job.g;
  const int nw = g.dst_w, W = p.out_width, H = p.out_height;
  int off[3];
  rgb_offsets (img.format, off);
  const Norm &nm = *job.norm;
  thread_local std::vector<float> f;
  if (f.size () < 3 * static_cast<size_t> (nw))
    f.resize (3 * static_cast<size_t> (nw));
  for (int r = r0; r < r1; r++) {
    const int y0 = job.vt.i0[r], y1 = job.vt.i1[r];
    const float ly = job.vt.lambda[r];
    for (int x = 0; x < nw; x++) {
      const int x0 = job.ht.i0[x], x1 = job.ht.i1[x];
      const float lx = job.ht.lambda[x];
      float a[3], b[3], c[3], d[3];
      fetch_rgb (img, off, x0, y0, a);
      fetch_rgb (img, off, x1, y0, b);
      fetch_rgb (img, off, x0, y1, c);
      fetch_rgb (img, off, x1, y1, d);
      for (int ch = 0; ch < 3; ch++) {
        const float top = (1.f - lx) * a[ch] + lx * b[ch];
        const float bot = (1.f - lx) * c[ch] + lx * d[ch];
        f[ch * nw + x] = (1.f - ly) * top + ly * bot;
      }
    }
    /* Normalized a row at a time, where the divisions vectorize. */
    for (int ch = 0; ch < 3; ch++) {
      nm.floats (ch, f.data () + ch * nw, nw);
      store_row (p, job.out, (static_cast<size_t> (ch) * H + g.dst_y + r) * W + g.dst_x,
                 f.data () + ch * nw, nw);
    }
  }
}

} // namespace

void
prep_cpu (const Params &p, const Image *views, int n_views, void *out, ThreadPool *pool)
{
  std::vector<ViewJob> jobs (n_views);
  const Norm norm (p);
  struct Task {
    int view, r0, r1; /* r1 < 0: pad fill of the whole view */
  };
  std::vector<Task> tasks;
  const int n_threads = pool ? pool->size () : 1;
  for (int v = 0; v < n_views; v++) {
    ViewJob &j = jobs[v];
    j.img = &views[v];
    j.norm = &norm;
    j.out = static_cast<uint8_t *> (out) + view_bytes (p) * v;
    const bool valid = views[v].planes[0] != nullptr;
    if (valid) {
      const Image &img = views[v];
      j.g = compute_geometry (p, img.width, img.height);
      if (p.filter != Filter::Bilinear) {
        j.hw = antialias_weights (img.width, j.g.box_x0, j.g.box_x1, j.g.dst_w,
                                  axis_bits (p.filter, j.g.box_x0, j.g.box_x1, j.g.dst_w));
        j.vw = antialias_weights (img.height, j.g.box_y0, j.g.box_y1, j.g.dst_h,
                                  axis_bits (p.filter, j.g.box_y0, j.g.box_y1, j.g.dst_h));
        if (p.filter == Filter::Antialias) {
          if (j.vw.bits == kFastBits)
            j.vw16.assign (j.vw.coeffs.begin (), j.vw.coeffs.end ());
          j.hp16 = make_hplan16 (j.hw, img.width);
        } else {
          const int bpp = format_is_yuv (img.format) ? 3 : format_pixel_stride (img.format);
          j.hp = make_hplan (j.hw, bpp, img.width * bpp);
        }
      } else {
        j.ht = bilinear_taps (img.width, j.g.box_x0, j.g.box_x1, j.g.dst_w);
        j.vt = bilinear_taps (img.height, j.g.box_y0, j.g.box_y1, j.g.dst_h);
      }
    }
    tasks.push_back ({v, valid ? 1 : 0, -1});
    if (!valid)
      continue;
    /* Bands of output rows: enough to keep every thread busy even with one view. Each band
     * filters the source rows it needs itself; neighbours overlap by the filter support. */
    const int n_bands = std::max (1, std::min (j.g.dst_h, (2 * n_threads + n_views - 1) / n_views));
    for (int b = 0; b < n_bands; b++) {
      int r0 = j.g.dst_h * b / n_bands, r1 = j.g.dst_h * (b + 1) / n_bands;
      if (r1 > r0)
        tasks.push_back ({v, r0, r1});
    }
  }
  auto fn = [&] (int i) {
    const Task &t = tasks[i];
    const ViewJob &j = jobs[t.view];
    if (t.r1 < 0)
      fill_pad_rows (p, norm, j.g, t.r0 != 0, j.out, 0, p.out_height);
    else if (p.filter == Filter::Antialias)
      antialias_band (p, j, t.r0, t.r1);
    else if (p.filter == Filter::Pil)
      pil_band (p, j, t.r0, t.r1);
    else
      bilinear_band (p, j, t.r0, t.r1);
  };
  if (pool && tasks.size () > 1) {
    pool->run (static_cast<int> (tasks.size ()), fn);
  } else {
    for (size_t i = 0; i < tasks.size (); i++)
      fn (static_cast<int> (i));
  }
}

} // namespace pi0::prep

bool
pi0::prep::have_cuda_build ()
{
#ifdef HAVE_CUDA
  return true;
#else
  return false;
#endif
}
