/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Where a view lands and which source pixels each output pixel reads: the resize geometry
 * (openpi's pad, stretch, crop) and the filter weights of each axis (PIL's triangle filter,
 * torch's bilinear taps). Shared by the CPU path, the CUDA path (which uploads them as tables)
 * and the tests. */

#include "kernels/pi0prep.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pi0::prep
{

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

} // namespace pi0::prep
