/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Property cases of pi0prep shared by the CPU (test_kernels) and CUDA (test_kernels_gpu)
 * suites: random source and output sizes, formats, modes, filters and dtypes, and the extreme
 * ratios of issue 16 (tiny outputs, 8K -> 1x1, 2-pixel-wide frames). Every case is checked
 * against the plain reference of pi0testprepreference.h. */

#include "tests/pi0testprepreference.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace pi0test
{

struct PrepCase {
  pi0::prep::Format format;
  int width, height;
  pi0::prep::Params params;
};

inline const pi0::prep::Format *
all_formats (size_t &n)
{
  using pi0::prep::Format;
  static const Format f[] = {Format::RGB,   Format::BGR,  Format::RGBx, Format::BGRx, Format::xRGB,
                             Format::xBGR,  Format::RGBA, Format::BGRA, Format::ARGB, Format::ABGR,
                             Format::GRAY8, Format::NV12, Format::I420, Format::NV21, Format::YV12,
                             Format::Y42B,  Format::Y444, Format::YUY2, Format::UYVY};
  n = sizeof (f) / sizeof (f[0]);
  return f;
}

inline std::string
describe (const PrepCase &c)
{
  std::ostringstream s;
  s << pi0::prep::format_name (c.format) << " " << c.width << "x" << c.height << " -> "
    << c.params.out_width << "x" << c.params.out_height << " resize=" << int (c.params.resize)
    << " filter=" << int (c.params.filter) << " dtype=" << int (c.params.dtype)
    << " mean0=" << c.params.mean[0];
  return s.str ();
}

inline PrepCase
make_case (pi0::prep::Format f, int w, int h, int ow, int oh,
           pi0::prep::Filter filter = pi0::prep::Filter::Antialias,
           pi0::prep::Resize resize = pi0::prep::Resize::Pad,
           pi0::prep::DType dtype = pi0::prep::DType::Float32)
{
  PrepCase c{f, w, h, {}};
  c.params.out_width = ow;
  c.params.out_height = oh;
  c.params.filter = filter;
  c.params.resize = resize;
  c.params.dtype = dtype;
  return c;
}

/* The sizes of issue 16 and the extremes around them, each with every filter. */
inline std::vector<PrepCase>
extreme_cases ()
{
  using pi0::prep::Filter;
  using pi0::prep::Format;
  using pi0::prep::Resize;
  std::vector<PrepCase> cases;
  for (Filter filt : {Filter::Antialias, Filter::Pil, Filter::Bilinear}) {
    /* The three crashes. */
    cases.push_back (make_case (Format::RGB, 640, 480, 1, 1, filt));
    cases.push_back (make_case (Format::NV12, 7680, 4320, 32, 32, filt));
    cases.push_back (make_case (Format::GRAY8, 2, 2500, 32, 32, filt));
    /* 8K -> 1x1 (pad; stretch has the same geometry here) and crop (a 4320x4320 box). */
    cases.push_back (make_case (Format::RGB, 7680, 4320, 1, 1, filt));
    cases.push_back (make_case (Format::RGB, 7680, 4320, 1, 1, filt, Resize::Crop));
    /* Long filters on one axis only, both ways, and a frame at the side limit. */
    cases.push_back (make_case (Format::YUY2, 4000, 3, 7, 5, filt, Resize::Stretch));
    cases.push_back (make_case (Format::I420, 3, 4000, 5, 7, filt, Resize::Stretch));
    cases.push_back (make_case (Format::GRAY8, pi0::prep::kMaxFrameSide, 2, 3, 3, filt));
    /* Tiny frames to large outputs, and 1-pixel rows and columns. */
    cases.push_back (make_case (Format::RGB, 1, 1, 300, 200, filt, Resize::Stretch));
    cases.push_back (make_case (Format::NV21, 1, 1, 7, 9, filt));
    cases.push_back (make_case (Format::UYVY, 1, 700, 1, 3, filt, Resize::Stretch));
    cases.push_back (make_case (Format::Y444, 700, 1, 3, 1, filt, Resize::Crop));
  }
  return cases;
}

/* Log-uniform in [lo, hi]. */
inline int
log_uniform (std::mt19937 &rng, int lo, int hi)
{
  std::uniform_real_distribution<double> d (std::log (double (lo)), std::log (double (hi) + 1));
  return std::min (hi, std::max (lo, int (std::exp (d (rng)))));
}

/* n random cases: any format, sources up to 2048 a side (at most ~1.5 megapixels, so that the
 * reference stays quick) and outputs up to 320 a side, every mode, filter and dtype, pi0 or
 * ImageNet normalization. */
inline std::vector<PrepCase>
random_cases (std::mt19937 &rng, int n)
{
  using namespace pi0::prep;
  size_t n_formats;
  const Format *formats = all_formats (n_formats);
  std::uniform_int_distribution<int> pick (0, 1 << 20);
  std::vector<PrepCase> cases;
  for (int i = 0; i < n; i++) {
    int w = log_uniform (rng, 1, 2048), h = log_uniform (rng, 1, 2048);
    while (double (w) * h > 1.5e6)
      (pick (rng) & 1 ? w : h) /= 2;
    PrepCase c =
        make_case (formats[pick (rng) % n_formats], w, h, log_uniform (rng, 1, 320),
                   log_uniform (rng, 1, 320), static_cast<Filter> (pick (rng) % 3),
                   static_cast<Resize> (pick (rng) % 3), static_cast<DType> (pick (rng) % 3));
    if (pick (rng) & 1) {
      const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
      for (int k = 0; k < 3; k++) {
        c.params.mean[k] = m[k];
        c.params.std[k] = s[k];
      }
    }
    cases.push_back (c);
  }
  return cases;
}

/* Random frames, made once per format and size (the 8K ones are large). */
class FrameCache
{
public:
  explicit FrameCache (unsigned seed) : rng_ (seed) {}
  const Frame &get (pi0::prep::Format f, int w, int h)
  {
    auto key = std::make_tuple (int (f), w, h);
    auto it = frames_.find (key);
    if (it == frames_.end ())
      it = frames_.emplace (key, random_frame (rng_, f, w, h)).first;
    return it->second;
  }

private:
  std::mt19937 rng_;
  std::map<std::tuple<int, int, int>, Frame> frames_;
};

/* Every value of @out against the reference; returns how many are outside the tolerance and
 * the worst difference. */
inline size_t
count_mismatches (const pi0::prep::Params &p, const Frame &f, const void *out, double &worst)
{
  const std::vector<double> ref = reference (p, &f);
  size_t bad = 0;
  worst = 0;
  for (size_t i = 0; i < ref.size (); i++) {
    const double d = std::fabs (out_value (p, out, i) - ref[i]);
    bad += d > tolerance (p, ref[i]);
    worst = std::max (worst, d);
  }
  return bad;
}

/* ---- normalization of the 256 levels (issue 16 item 12) ---- */

/* openpi's Observation.from_dict: x.astype(np.float32) / 255 * 2 - 1, one float32 operation at
 * a time (volatile: each result is rounded to float32 as numpy does, nothing fused). */
inline float
openpi_normalize (int level)
{
  volatile float q = static_cast<float> (level);
  q = q / 255.0f;
  q = q * 2.0f;
  q = q - 1.0f;
  return q;
}

/* torchvision's ToTensor + Normalize in float32: x / 255, then (t - mean) / std. */
inline float
torchvision_normalize (int level, float mean, float std)
{
  volatile float q = static_cast<float> (level);
  q = q / 255.0f;
  q = q - mean;
  q = q / std;
  return q;
}

/* A 16x16 RGB frame holding every level in every channel: pixel i = x + 16 y has R = i,
 * G = 255 - i, B = 7 i mod 256 (a permutation). Resized to 16x16 every filter is the identity. */
inline Frame
levels_frame ()
{
  Frame f;
  f.format = pi0::prep::Format::RGB;
  f.width = f.height = 16;
  f.strides[0] = 48;
  f.planes[0].resize (48 * 16);
  for (int i = 0; i < 256; i++) {
    f.planes[0][3 * i] = uint8_t (i);
    f.planes[0][3 * i + 1] = uint8_t (255 - i);
    f.planes[0][3 * i + 2] = uint8_t ((7 * i) & 255);
  }
  return f;
}

inline int
level_of (int c, int i)
{
  return c == 0 ? i : c == 1 ? 255 - i : (7 * i) & 255;
}

/* The bits a float32 value has in @dtype: float32 itself, bfloat16 rounded to nearest even,
 * IEEE half (through the compiler's _Float16, as the CPU path). */
inline uint32_t
dtype_bits (pi0::prep::DType d, float v)
{
  uint32_t u;
  std::memcpy (&u, &v, 4);
  if (d == pi0::prep::DType::Float32)
    return u;
  if (d == pi0::prep::DType::BFloat16)
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  _Float16 h = static_cast<_Float16> (v);
  uint16_t b;
  std::memcpy (&b, &h, 2);
  return b;
}

inline uint32_t
out_bits (pi0::prep::DType d, const void *out, size_t i)
{
  if (d == pi0::prep::DType::Float32)
    return static_cast<const uint32_t *> (out)[i];
  return static_cast<const uint16_t *> (out)[i];
}

/* Counts the values of a [3,16,16] output of levels_frame() that are not @want(level) in the
 * output dtype bit for bit; reports the first. */
template <typename Want>
inline int
count_level_mismatches (const pi0::prep::Params &p, const void *out, Want want, std::string &first)
{
  int bad = 0;
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 256; i++) {
      const int level = level_of (c, i);
      const float w = want (level, c);
      const uint32_t got = out_bits (p.dtype, out, size_t (c) * 256 + i);
      if (got != dtype_bits (p.dtype, w) && bad++ == 0) {
        std::ostringstream s;
        s.precision (9);
        s << "level " << level << " channel " << c << ": got bits 0x" << std::hex << got
          << ", want 0x" << dtype_bits (p.dtype, w) << std::dec << " (" << w << ")";
        first = s.str ();
      }
    }
  return bad;
}

} // namespace pi0test
