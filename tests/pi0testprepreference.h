/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Test side of pi0prep: random frames in every format, and a plain reference of the
 * preprocessing, written from the definitions (PIL's bilinear resample, torch's bilinear
 * interpolate, openpi's pad geometry) in double precision, one output value at a time, with
 * none of the optimised code's tables, bands, threads or SIMD. */

#include "kernels/pi0prep.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace pi0test
{

struct Frame {
  pi0::prep::Format format;
  int width, height;
  std::vector<uint8_t> planes[3];
  size_t strides[3] = {0, 0, 0};
  pi0::prep::YuvMatrix yuv;

  pi0::prep::Image image () const
  {
    pi0::prep::Image im;
    im.format = format;
    im.width = width;
    im.height = height;
    im.yuv = yuv;
    for (int p = 0; p < 3; p++) {
      im.planes[p] = planes[p].empty () ? nullptr : planes[p].data ();
      im.strides[p] = strides[p];
    }
    return im;
  }
};

inline bool
is_yuv (pi0::prep::Format f)
{
  using pi0::prep::Format;
  return f == Format::NV12 || f == Format::NV21 || f == Format::I420 || f == Format::YV12 ||
         f == Format::Y42B || f == Format::Y444 || f == Format::YUY2 || f == Format::UYVY;
}

/* Bytes of one row of @plane (the smallest stride allowed). */
inline size_t
row_bytes (pi0::prep::Format f, int w, int plane)
{
  using pi0::prep::Format;
  const size_t half = (w + 1) / 2;
  switch (f) {
    case Format::NV12:
    case Format::NV21:
      return plane == 0 ? w : 2 * half;
    case Format::I420:
    case Format::YV12:
    case Format::Y42B:
      return plane == 0 ? w : half;
    case Format::Y444:
      return w;
    case Format::YUY2:
    case Format::UYVY:
      return 4 * half;
    default:
      return static_cast<size_t> (w) * pi0::prep::format_pixel_stride (f);
  }
}

/* Rows of @plane: 4:2:0 chroma planes have half the rows (rounded up). */
inline int
plane_rows (pi0::prep::Format f, int h, int plane)
{
  using pi0::prep::Format;
  const bool half = plane > 0 && (f == Format::NV12 || f == Format::NV21 || f == Format::I420 ||
                                  f == Format::YV12);
  return half ? (h + 1) / 2 : h;
}

/* Random bytes everywhere (row padding included), rows padded by 0..extra_max bytes. */
inline Frame
random_frame (std::mt19937 &rng, pi0::prep::Format f, int w, int h, int extra_max = 13)
{
  Frame fr;
  fr.format = f;
  fr.width = w;
  fr.height = h;
  fr.yuv = pi0::prep::make_yuv_matrix (0.299, 0.114, false);
  std::uniform_int_distribution<int> extra (0, extra_max);
  for (int p = 0; p < pi0::prep::format_n_planes (f); p++) {
    fr.strides[p] = row_bytes (f, w, p) + extra (rng);
    const int rows = plane_rows (f, h, p);
    fr.planes[p].resize (fr.strides[p] * rows);
    /* four bytes per draw: 8K frames are made in a fraction of a second */
    uint32_t bits = 0;
    for (size_t i = 0; i < fr.planes[p].size (); i++) {
      if (i % 4 == 0)
        bits = static_cast<uint32_t> (rng ());
      fr.planes[p][i] = static_cast<uint8_t> (bits >> (8 * (i % 4)));
    }
  }
  return fr;
}

/* ---- the reference ---- */

inline double
ref_round8 (double v)
{
  v = std::floor (v + 0.5);
  return std::min (255.0, std::max (0.0, v));
}

/* The Y, U, V samples of pixel (x, y) of a YUV frame: the chroma of the pixel's 2x2 (4:2:0) or
 * 2x1 (4:2:2) block, no interpolation. Planes in memory order (YV12: Y, V, U). */
inline void
ref_yuv (const Frame &f, int x, int y, int &Y, int &U, int &V)
{
  using pi0::prep::Format;
  const std::vector<uint8_t> *P = f.planes;
  auto at = [&] (int plane, int row, size_t byte) {
    return int (P[plane][f.strides[plane] * row + byte]);
  };
  switch (f.format) {
    case Format::NV12:
      Y = at (0, y, x);
      U = at (1, y / 2, 2 * (x / 2));
      V = at (1, y / 2, 2 * (x / 2) + 1);
      break;
    case Format::NV21:
      Y = at (0, y, x);
      V = at (1, y / 2, 2 * (x / 2));
      U = at (1, y / 2, 2 * (x / 2) + 1);
      break;
    case Format::I420:
      Y = at (0, y, x);
      U = at (1, y / 2, x / 2);
      V = at (2, y / 2, x / 2);
      break;
    case Format::YV12:
      Y = at (0, y, x);
      V = at (1, y / 2, x / 2);
      U = at (2, y / 2, x / 2);
      break;
    case Format::Y42B:
      Y = at (0, y, x);
      U = at (1, y, x / 2);
      V = at (2, y, x / 2);
      break;
    case Format::Y444:
      Y = at (0, y, x);
      U = at (1, y, x);
      V = at (2, y, x);
      break;
    case Format::YUY2: /* Y0 U Y1 V */
      Y = at (0, y, 2 * x);
      U = at (0, y, 4 * (x / 2) + 1);
      V = at (0, y, 4 * (x / 2) + 3);
      break;
    case Format::UYVY: /* U Y0 V Y1 */
      Y = at (0, y, 2 * x + 1);
      U = at (0, y, 4 * (x / 2));
      V = at (0, y, 4 * (x / 2) + 2);
      break;
    default:
      Y = U = V = 0;
      break;
  }
}

/* The frame's RGB at (x, y), as uint8 values. */
inline void
ref_rgb (const Frame &f, int x, int y, double rgb[3])
{
  using pi0::prep::Format;
  if (is_yuv (f.format)) {
    int Yi, Ui, Vi;
    ref_yuv (f, x, y, Yi, Ui, Vi);
    const double Y = Yi, U = Ui, V = Vi;
    const pi0::prep::YuvMatrix &m = f.yuv;
    const double yy = double (m.ys) * (Y - m.y_offset);
    rgb[0] = ref_round8 (yy + double (m.rv) * (V - 128));
    rgb[1] = ref_round8 (yy - double (m.gu) * (U - 128) - double (m.gv) * (V - 128));
    rgb[2] = ref_round8 (yy + double (m.bu) * (U - 128));
    return;
  }
  const uint8_t *px = f.planes[0].data () + f.strides[0] * y;
  int r, g, b;
  switch (f.format) {
    case Format::RGB:
      r = 0;
      g = 1;
      b = 2;
      px += 3 * x;
      break;
    case Format::BGR:
      r = 2;
      g = 1;
      b = 0;
      px += 3 * x;
      break;
    case Format::RGBx:
    case Format::RGBA:
      r = 0;
      g = 1;
      b = 2;
      px += 4 * x;
      break;
    case Format::BGRx:
    case Format::BGRA:
      r = 2;
      g = 1;
      b = 0;
      px += 4 * x;
      break;
    case Format::xRGB:
    case Format::ARGB:
      r = 1;
      g = 2;
      b = 3;
      px += 4 * x;
      break;
    case Format::xBGR:
    case Format::ABGR:
      r = 3;
      g = 2;
      b = 1;
      px += 4 * x;
      break;
    default:
      r = g = b = 0;
      px += x;
      break; /* GRAY8 */
  }
  rgb[0] = px[r];
  rgb[1] = px[g];
  rgb[2] = px[b];
}

struct RefGeometry {
  int x, y, w, h;
  double bx0, by0, bx1, by1;
};

inline RefGeometry
ref_geometry (const pi0::prep::Params &p, int iw, int ih)
{
  RefGeometry g{0, 0, p.out_width, p.out_height, 0, 0, double (iw), double (ih)};
  if (p.resize == pi0::prep::Resize::Pad) {
    /* openpi_client.image_tools._resize_with_pad_pil */
    double ratio = std::max (double (iw) / p.out_width, double (ih) / p.out_height);
    g.h = int (ih / ratio);
    g.w = int (iw / ratio);
    /* A side that int() takes to 0 (openpi's PIL resize would refuse it) keeps one pixel. */
    g.h = std::min (std::max (g.h, 1), p.out_height);
    g.w = std::min (std::max (g.w, 1), p.out_width);
    g.y = std::max (0, int ((p.out_height - g.h) / 2.0));
    g.x = std::max (0, int ((p.out_width - g.w) / 2.0));
  } else if (p.resize == pi0::prep::Resize::Crop) {
    double ratio = std::min (double (iw) / p.out_width, double (ih) / p.out_height);
    double bw = p.out_width * ratio, bh = p.out_height * ratio;
    g.bx0 = float ((iw - bw) / 2);
    g.by0 = float ((ih - bh) / 2);
    g.bx1 = float (g.bx0 + bw);
    g.by1 = float (g.by0 + bh);
  }
  return g;
}

/* PIL bilinear resample weights of output pixel i (fixed point, as ImagingResample uses). */
inline void
ref_pil_taps (int in, double in0, double in1, int out, int i, int &first, std::vector<int64_t> &w,
              int bits)
{
  const double scale = (in1 - in0) / out;
  const double fscale = std::max (1.0, scale);
  const double center = in0 + (i + 0.5) * scale;
  first = std::max (0, int (center - fscale + 0.5));
  const int last = std::min (in, int (center + fscale + 0.5));
  std::vector<double> d;
  double sum = 0;
  for (int x = first; x < last; x++) {
    double t = std::fabs ((x - center + 0.5) / fscale);
    d.push_back (t < 1 ? 1 - t : 0);
    sum += d.back ();
  }
  w.clear ();
  for (double v : d)
    w.push_back (int64_t (0.5 + (sum != 0 ? v / sum : v) * (1 << bits)));
}

/* Fractional bits of one axis: PIL's 22 for filter=pil; filter=antialias 14, or 22 when the
 * axis's triangle filter has more than 128 taps (2 * ceil (max (scale, 1)) + 1). */
inline int
ref_bits (pi0::prep::Filter f, double in0, double in1, int out)
{
  if (f == pi0::prep::Filter::Pil)
    return 22;
  const int taps = 2 * int (std::ceil (std::max (1.0, (in1 - in0) / out))) + 1;
  return taps <= 128 ? 14 : 22;
}

inline double
ref_pil_clip (int64_t acc, int bits)
{
  acc += int64_t (1) << (bits - 1);
  return std::min<int64_t> (255, std::max<int64_t> (0, acc >> bits));
}

/* Whole output [3,H,W] in double, normalized. */
inline std::vector<double>
reference (const pi0::prep::Params &p, const Frame *f)
{
  const int W = p.out_width, H = p.out_height;
  std::vector<double> out (3 * size_t (W) * H);
  /* out = (v / 255 - mean) / std */
  auto norm = [&] (double v, int c) {
    return (v / 255.0 - double (p.mean[c])) / double (p.std[c]);
  };
  for (int c = 0; c < 3; c++)
    for (size_t i = 0; i < size_t (W) * H; i++)
      out[c * size_t (W) * H + i] = norm (0.0, c);
  if (!f)
    return out;
  const RefGeometry g = ref_geometry (p, f->width, f->height);
  /* PIL's filters read each pixel many times: the frame as RGB, converted once. */
  std::vector<uint8_t> frame_rgb;
  if (p.filter != pi0::prep::Filter::Bilinear) {
    frame_rgb.resize (size_t (f->width) * f->height * 3);
    for (int y = 0; y < f->height; y++)
      for (int x = 0; x < f->width; x++) {
        double v[3];
        ref_rgb (*f, x, y, v);
        for (int c = 0; c < 3; c++)
          frame_rgb[(size_t (y) * f->width + x) * 3 + c] = uint8_t (v[c]);
      }
  }
  auto rgb_at = [&] (int x, int y) {
    return frame_rgb.data () + (size_t (y) * f->width + x) * 3;
  };
  auto put = [&] (int x, int y, const double v[3]) {
    for (int c = 0; c < 3; c++)
      out[(c * size_t (H) + g.y + y) * W + g.x + x] = norm (v[c], c);
  };

  if (p.filter == pi0::prep::Filter::Pil) {
    /* PIL: horizontal pass over every source row, rounded to uint8 (its intermediate image),
     * then vertical; 22-bit weights. */
    const int bits = 22;
    std::vector<double> mid (size_t (f->height) * g.w * 3);
    int first;
    std::vector<int64_t> w;
    for (int x = 0; x < g.w; x++) {
      ref_pil_taps (f->width, g.bx0, g.bx1, g.w, x, first, w, bits);
      for (int y = 0; y < f->height; y++) {
        int64_t acc[3] = {0, 0, 0};
        for (size_t k = 0; k < w.size (); k++) {
          const uint8_t *rgb = rgb_at (first + int (k), y);
          for (int c = 0; c < 3; c++)
            acc[c] += int64_t (rgb[c]) * w[k];
        }
        for (int c = 0; c < 3; c++)
          mid[(size_t (y) * g.w + x) * 3 + c] = ref_pil_clip (acc[c], bits);
      }
    }
    for (int y = 0; y < g.h; y++) {
      ref_pil_taps (f->height, g.by0, g.by1, g.h, y, first, w, bits);
      for (int x = 0; x < g.w; x++) {
        int64_t acc[3] = {0, 0, 0};
        for (size_t k = 0; k < w.size (); k++)
          for (int c = 0; c < 3; c++)
            acc[c] += int64_t (mid[(size_t (first + k) * g.w + x) * 3 + c]) * w[k];
        double v[3];
        for (int c = 0; c < 3; c++)
          v[c] = ref_pil_clip (acc[c], bits);
        put (x, y, v);
      }
    }
  } else if (p.filter == pi0::prep::Filter::Antialias) {
    /* The same filter with 14-bit weights (22-bit on an axis whose filter is long), vertical
     * pass first (rounded to uint8), then horizontal. */
    const int vbits = ref_bits (p.filter, g.by0, g.by1, g.h);
    const int hbits = ref_bits (p.filter, g.bx0, g.bx1, g.w);
    std::vector<double> mid (size_t (g.h) * f->width * 3);
    int first;
    std::vector<int64_t> w;
    for (int y = 0; y < g.h; y++) {
      ref_pil_taps (f->height, g.by0, g.by1, g.h, y, first, w, vbits);
      for (int x = 0; x < f->width; x++) {
        int64_t acc[3] = {0, 0, 0};
        for (size_t k = 0; k < w.size (); k++) {
          const uint8_t *rgb = rgb_at (x, first + int (k));
          for (int c = 0; c < 3; c++)
            acc[c] += int64_t (rgb[c]) * w[k];
        }
        for (int c = 0; c < 3; c++)
          mid[(size_t (y) * f->width + x) * 3 + c] = ref_pil_clip (acc[c], vbits);
      }
    }
    for (int x = 0; x < g.w; x++) {
      ref_pil_taps (f->width, g.bx0, g.bx1, g.w, x, first, w, hbits);
      for (int y = 0; y < g.h; y++) {
        int64_t acc[3] = {0, 0, 0};
        for (size_t k = 0; k < w.size (); k++)
          for (int c = 0; c < 3; c++)
            acc[c] += int64_t (mid[(size_t (y) * f->width + first + k) * 3 + c]) * w[k];
        double v[3];
        for (int c = 0; c < 3; c++)
          v[c] = ref_pil_clip (acc[c], hbits);
        put (x, y, v);
      }
    }
  } else {
    /* torch bilinear, align_corners=False: src = (dst + 0.5) * in/out - 0.5, clamped at 0,
     * in float as ATen computes it for float images (area_pixel_compute_source_index with a
     * float scale): at 65536 pixels the float coordinate is off the exact one by ~0.004. */
    auto src = [] (int in, double in0, double in1, int out, int i, int &i0, int &i1, double &l) {
      const float scale = float ((in1 - in0) / out);
      float s = scale * (float (i) + 0.5f) - 0.5f;
      s = std::max (s, 0.f) + float (in0);
      i0 = std::min (int (s), in - 1);
      i1 = std::min (i0 + 1, in - 1);
      l = std::min (1.0, std::max (0.0, double (s) - i0));
    };
    for (int y = 0; y < g.h; y++) {
      int y0, y1;
      double ly;
      src (f->height, g.by0, g.by1, g.h, y, y0, y1, ly);
      for (int x = 0; x < g.w; x++) {
        int x0, x1;
        double lx;
        src (f->width, g.bx0, g.bx1, g.w, x, x0, x1, lx);
        double a[3], b[3], c[3], d[3], v[3];
        ref_rgb (*f, x0, y0, a);
        ref_rgb (*f, x1, y0, b);
        ref_rgb (*f, x0, y1, c);
        ref_rgb (*f, x1, y1, d);
        for (int ch = 0; ch < 3; ch++)
          v[ch] = (1 - ly) * ((1 - lx) * a[ch] + lx * b[ch]) + ly * ((1 - lx) * c[ch] + lx * d[ch]);
        put (x, y, v);
      }
    }
  }
  return out;
}

/* Output element i as float, whatever the dtype. */
inline double
out_value (const pi0::prep::Params &p, const void *out, size_t i)
{
  if (p.dtype == pi0::prep::DType::Float32)
    return static_cast<const float *> (out)[i];
  uint16_t h = static_cast<const uint16_t *> (out)[i];
  if (p.dtype == pi0::prep::DType::BFloat16) {
    uint32_t u = uint32_t (h) << 16;
    float f;
    std::memcpy (&f, &u, 4);
    return f;
  }
  /* IEEE half, decoded by hand. */
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp (m, -24) : std::ldexp (1024 + m, e - 25);
  return sign ? -v : v;
}

/* Tolerance: 1e-3 in normalized units, plus half an ulp of the 16-bit types. */
inline double
tolerance (const pi0::prep::Params &p, double ref)
{
  switch (p.dtype) {
    case pi0::prep::DType::BFloat16:
      return 1e-3 + std::fabs (ref) * std::ldexp (1.0, -8);
    case pi0::prep::DType::Float16:
      return 1e-3 + std::fabs (ref) * std::ldexp (1.0, -11);
    default:
      return 1e-3;
  }
}

} // namespace pi0test
