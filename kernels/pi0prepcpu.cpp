/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* prep_cpu: the CPU path's driver. Plans each view (geometry, weights, pass plans), cuts its
 * output into bands of rows for the thread pool, and runs each band through the filter's passes
 * from the source rows it needs to normalized values in the output dtype. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "kernels/pi0prep.h"
#include "kernels/pi0prepinternal.h"
#include "kernels/pi0prepyuv.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace pi0::prep
{

namespace
{

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

/* With the CPU path, which every build has, so that a caller can ask whether the CUDA path was
 * built too. */
bool
pi0::prep::have_cuda_build ()
{
#ifdef HAVE_CUDA
  return true;
#else
  return false;
#endif
}
