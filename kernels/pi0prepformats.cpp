/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0prep's formats and what a frame must be: names, planes, pixel layouts, sizes of a frame's
 * planes and of a view's output, and validate(), which checks all of it before any work. */

#include "kernels/pi0prep.h"
#include "kernels/pi0prepinternal.h"
#include "kernels/pi0prepyuv.h"

#include <cmath>
#include <cstring>
#include <string>

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

void
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

} // namespace pi0::prep
