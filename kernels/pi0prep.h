/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* pi0prep: camera frames -> Pi0 model input ([3,H,W] per view, plane-major, normalized).
 *
 * Plain C++ (no GStreamer): a CPU path (prep_cpu, threaded) and a CUDA path (prep_cuda, one
 * stream per view) with the same results. The semantics are openpi's:
 *
 *  - resize=pad: scale by the larger of the two ratios, resized size truncated with int() as
 *    Python does, centred on a black canvas with the odd pixel going to the bottom/right
 *    (openpi_client.image_tools.resize_with_pad). stretch: to the output size. crop: scale by
 *    the smaller ratio and cut the centre (a source box, as PIL's resize(box=...)).
 *  - filter=pil: PIL's BILINEAR resize exactly (a triangle filter whose support grows with the
 *    downscale factor), horizontal pass then vertical pass, both in PIL's 22-bit fixed point
 *    with the intermediate rounded to uint8: bit-identical to openpi's resize_with_pad.
 *  - filter=antialias (default): the same filter and weights at 14-bit precision, vertical pass
 *    first. Vertical-first filters whole contiguous rows (it vectorizes with 16-bit multiplies)
 *    and leaves only the few output rows for the awkward interleaved horizontal pass, which is
 *    what makes the CPU path fast; the price is a different intermediate rounding: about
 *    85-90% of values identical to PIL's, the rest one uint8 level off (two for about one value
 *    in a billion, where both roundings and the shorter weights add up).
 *  Integer sums are exact in any order, so the optimised CPU code, the CUDA kernels and the
 *  test reference agree bit for bit for both.
 *  - filter=bilinear: torch.nn.functional.interpolate(mode='bilinear', align_corners=False,
 *    antialias=False) in float, no intermediate rounding.
 *  - YUV input is first converted to RGB uint8 (round half up, clamp) with the matrix given in
 *    the Image; chroma is taken from the sample of the pixel's 2x2 (4:2:0) or 2x1 (4:2:2) block
 *    (no chroma interpolation).
 *  - out = (v / 255 - mean[c]) / std[c], evaluated in float32 in that order (normalize_value);
 *    padding is black (v = 0) before normalization. With mean = std = 0.5 this is bit for bit
 *    openpi's x.astype(float32) / 255 * 2 - 1.
 *  - Any frame and output size works (a frame side is at most kMaxFrameSide): filters too long
 *    for the fast paths (downscales beyond ~63x on an axis) take bounded, slower ones.
 */

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pi0::prep
{

enum class Format {
  RGB,
  BGR, /* 3 bytes per pixel */
  RGBx,
  BGRx,
  xRGB,
  xBGR, /* 4 bytes, one ignored */
  RGBA,
  BGRA,
  ARGB,
  ABGR,  /* 4 bytes, alpha ignored */
  GRAY8, /* 1 byte, replicated to R=G=B */
  NV12,  /* Y plane + interleaved UV plane, 2x2 subsampled */
  I420,  /* Y, U, V planes, 2x2 subsampled */
  NV21,  /* NV12 with V before U */
  YV12,  /* I420 with the V plane before the U plane */
  Y42B,  /* Y, U, V planes, 2x1 subsampled (4:2:2) */
  Y444,  /* Y, U, V planes, full resolution */
  YUY2,  /* packed Y0 U Y1 V, 2x1 subsampled: what most USB (UVC) cameras give raw */
  UYVY,  /* packed U Y0 V Y1, 2x1 subsampled */
};

enum class Resize { Pad, Stretch, Crop };
enum class Filter { Antialias, Pil, Bilinear };
enum class DType { Float32, Float16, BFloat16 };

/* GStreamer's name of the format ("RGB", "NV12", ...), as video caps write it. */
const char *format_name (Format f);
/* Every format, in the order the elements' caps and messages list them. */
constexpr Format kFormats[] = {
    Format::RGB,  Format::BGR,  Format::RGBx, Format::BGRx, Format::xRGB,  Format::xBGR, Format::RGBA,
    Format::BGRA, Format::ARGB, Format::ABGR, Format::NV12, Format::NV21,  Format::I420, Format::YV12,
    Format::Y42B, Format::Y444, Format::GRAY8, Format::YUY2, Format::UYVY,
};
/* The format GStreamer calls @name; false for one that is not in kFormats. */
bool format_from_name (const char *name, Format *out);
/* kFormats' names, comma-separated: "RGB, BGR, ..., UYVY". */
std::string format_list ();
int format_n_planes (Format f);
/* Bytes per pixel of a packed RGB format (1 for GRAY8, 0 for YUV). */
int format_pixel_stride (Format f);

/* YUV -> RGB: R = ys*(Y-yo) + rv*(V-128), G = ys*(Y-yo) - gu*(U-128) - gv*(V-128),
 * B = ys*(Y-yo) + bu*(U-128). The coefficients are multiples of 2^-14 so that float and double
 * evaluate the sum exactly: CPU, GPU and the test reference then round identically. */
struct YuvMatrix {
  float y_offset = 16.f;
  float ys = 0.f, rv = 0.f, gu = 0.f, gv = 0.f, bu = 0.f;
};
/* From the luma weights Kr, Kb (BT.601: 0.299/0.114, BT.709: 0.2126/0.0722) and range. */
YuvMatrix make_yuv_matrix (double kr, double kb, bool full_range);

/* One input frame in host (prep_cpu) or device (prep_cuda) memory. planes[0] == nullptr means
 * an invalid (masked) view: the output is the pad value everywhere. Planes are in memory order,
 * as GstVideoFrame gives them (YV12: Y, V, U). */
struct Image {
  Format format = Format::RGB;
  int width = 0, height = 0;
  const uint8_t *planes[3] = {nullptr, nullptr, nullptr};
  size_t strides[3] = {0, 0, 0};
  YuvMatrix yuv;
};

struct Params {
  int out_width = 224, out_height = 224;
  Resize resize = Resize::Pad;
  Filter filter = Filter::Antialias;
  float mean[3] = {0.5f, 0.5f, 0.5f}; /* in [0,1] units; pi0: x/255*2 - 1 */
  float std[3] = {0.5f, 0.5f, 0.5f};
  DType dtype = DType::Float32;
};

/* The normalization of one value v in 0..255: (v / 255 - mean) / std in float32, each operation
 * rounded as written. With mean = std = 0.5 it equals openpi's float32 x / 255 * 2 - 1 exactly:
 * (q - 0.5) / 0.5 and q * 2 - 1 are the same binary operations scaled by a power of two. With
 * the ImageNet values it is torchvision's ToTensor + Normalize. The CPU path tabulates it for
 * the 256 levels; the CUDA path evaluates the same operations (IEEE division, no contraction). */
inline float
normalize_value (float v, float mean, float std)
{
  return (v / 255.f - mean) / std;
}

size_t dtype_size (DType d);
/* Bytes one view occupies in the output: 3 * out_height * out_width * dtype_size. */
size_t view_bytes (const Params &p);

/* Bytes each plane of a frame spans: stride * rows of that plane (the last row included in
 * full). Callers compare this with the memory they hold before handing the frame over. */
size_t plane_span (Format f, int height, int plane, size_t stride);
/* Largest frame width or height accepted: the weights stay meaningful (PIL's 22-bit fixed point
 * still gives each tap of a 65536:1 downscale a weight of 64) and row byte counts fit an int. */
constexpr int kMaxFrameSide = 65536;

/* Checks sizes and strides against the format (a stride shorter than a row is refused, so is a
 * frame side above kMaxFrameSide). Returns an empty string when fine, otherwise what is wrong. */
std::string validate (const Params &p, const Image &img);

/* ---- output memory ---- */

/* A pool of equally sized output blocks (host, or device for the CUDA path). A block outlives
 * whoever made it when a buffer downstream still holds it, so each block keeps its pool alive.
 * Thread-safe: blocks come back from whichever thread drops the last reference. */
class BlockPool : public std::enable_shared_from_this<BlockPool>
{
public:
  using Alloc = void *(*)(size_t);
  using Free = void (*) (void *);

  struct Block {
    std::shared_ptr<BlockPool> pool;
    void *data = nullptr;
    size_t size = 0;
    /* The CUDA path's: an event recorded when the block was written, and how it goes. */
    void *event = nullptr;
    void (*destroy_event) (void *) = nullptr;
  };

  static std::shared_ptr<BlockPool> make (Alloc alloc, Free free);
  /* Host memory, 64-byte aligned so rows can be stored with full vectors. */
  static std::shared_ptr<BlockPool> host ();
  ~BlockPool ();

  /* A block of @size bytes: a free one, or a new one (the free ones of another size are let go:
   * a new geometry or dtype). nullptr when allocation fails. */
  Block *acquire (size_t size);
  /* Gives @b back to its pool (or frees it after close(), or when its size is no longer the
   * pool's). Takes a void * to serve as a GDestroyNotify. */
  static void release (void *b);
  /* From now on blocks that come back are freed (the owner stopped). */
  void close ();

private:
  BlockPool (Alloc alloc, Free free) : alloc_ (alloc), free_ (free) {}
  std::mutex lock_;
  size_t size_ = 0;
  bool closed_ = false;
  std::vector<void *> free_blocks_;
  Alloc alloc_;
  Free free_;
};

/* ---- geometry and filter weights (shared by the CPU and CUDA paths and the tests) ---- */

/* Where a view lands in the output and which part of the source it comes from. */
struct Geometry {
  int dst_x = 0, dst_y = 0, dst_w = 0, dst_h = 0;        /* resized rectangle inside the output */
  double box_x0 = 0, box_y0 = 0, box_x1 = 0, box_y1 = 0; /* source box, pixels */
};
Geometry compute_geometry (const Params &p, int in_width, int in_height);

constexpr int kPrecisionBits = 32 - 8 - 2; /* PIL's fixed point for 8-bit images */
constexpr int kFastBits = 14;              /* filter=antialias: weights fit int16 */
/* filter=antialias keeps 14-bit (int16) weights on an axis whose filter has at most this many
 * taps (a downscale up to ~63x); a longer filter gets PIL's 22 bits and 32-bit arithmetic, since
 * 14 bits would round its many small weights too coarsely (at 8K -> 1 pixel the sum of the
 * rounded weights is off by ~3 %, beyond 32768x every weight would round to 0). */
constexpr int kFastMaxTaps = 128;

/* Taps of the triangle filter of one axis: 2 * ceil (max (scale, 1)) + 1. */
int filter_taps (double in0, double in1, int out_size);
/* Fractional bits of one axis's weights: kPrecisionBits for filter=pil, and for
 * filter=antialias when filter_taps > kFastMaxTaps; kFastBits otherwise. */
int axis_bits (Filter f, double in0, double in1, int out_size);

/* PIL's triangle-filter weights for one axis: out pixel i reads in[bounds[i]..+count[i]) with
 * weights coeffs[i*ksize ..]. */
struct AxisWeights {
  int out_size = 0, ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> coeffs; /* fixed point with `bits` fractional bits */
  int bits = kPrecisionBits;
};
AxisWeights antialias_weights (int in_size, double in0, double in1, int out_size,
                               int bits = kPrecisionBits);

/* Source taps for torch's bilinear (align_corners=False): out i = in[i0]*(1-l) + in[i1]*l. */
struct AxisTaps {
  std::vector<int> i0, i1;
  std::vector<float> lambda;
};
AxisTaps bilinear_taps (int in_size, double in0, double in1, int out_size);

/* ---- CPU path ---- */

/* Runs fn(0..n_tasks-1) on its threads (and the caller's). Persistent, so a frame does not pay
 * for thread creation. */
class ThreadPool
{
public:
  explicit ThreadPool (int n_threads);
  ~ThreadPool ();
  ThreadPool (const ThreadPool &) = delete;
  ThreadPool &operator= (const ThreadPool &) = delete;
  int size () const;
  void run (int n_tasks, const std::function<void (int)> &fn);

private:
  struct Impl;
  Impl *impl_;
};

/* Writes n_views images of [3, out_height, out_width] to out (n_views * view_bytes(p) bytes).
 * pool == nullptr runs serially on the calling thread. The images must pass validate(). */
void prep_cpu (const Params &p, const Image *views, int n_views, void *out, ThreadPool *pool);

/* ---- CUDA path (available when built with CUDA: see have_cuda_build) ---- */

bool have_cuda_build ();

} // namespace pi0::prep
