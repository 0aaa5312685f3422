/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The host side of CudaPrep, the CUDA path of one view: the weight tables built from the
 * geometry and uploaded once per geometry, the choice between the tiled kernels and the
 * two-pass fallback (shared memory per tile, strips of the intermediate), and the launches on
 * the caller's stream; and cuda_error_text, how kernels/ names a CUDA error. The kernels
 * themselves are in kernels/pi0prepkernels.cu. */

#include "kernels/pi0prepcuda.h"
#include "kernels/pi0prepkernels.h"

#include <algorithm>
#include <cstring>

namespace pi0::prep
{

std::string
cuda_error_text (cudaError_t err)
{
  return std::string (cudaGetErrorName (err)) + " (" + cudaGetErrorString (err) + ")";
}

namespace
{

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

  if (!dp.valid) {
    launch_pad (dp, out, stream);
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
    launch_pad (dp, out, stream);
    uint8_t *tmp = static_cast<uint8_t *> (s.inter);
    for (const Strip &st : s.strips) {
      if (p.filter == Filter::Pil) {
        launch_pil_rows (di, st.src0, st.n_src, s.g.dst_w, ip[0], ip[1], ip[2], s.hk, s.hbits, tmp,
                         stream);
        launch_pil_cols (dp, st.r0, st.r1, st.src0, ip[3], ip[4], ip[5], s.vk, s.vbits, tmp, out,
                         stream);
      } else {
        launch_antialias_rows (di, st.r0, st.r1 - st.r0, s.col0, s.n_cols, ip[3], ip[4], ip[5],
                               s.vk, s.vbits, tmp, stream);
        launch_antialias_cols (dp, st.r0, st.r1, s.col0, s.n_cols, ip[0], ip[1], ip[2], s.hk,
                               s.hbits, tmp, out, stream);
      }
      cudaError_t err = cudaGetLastError ();
      if (err != cudaSuccess)
        return err;
    }
  } else if (p.filter == Filter::Pil) {
    launch_pil (di, dp, s.th, s.shared, ip[0], ip[1], ip[2], s.hk, ip[3], ip[4], ip[5], s.vk, out,
                stream);
  } else if (p.filter == Filter::Antialias) {
    launch_antialias (di, dp, s.th, s.shared, s.max_cols, ip[0], ip[1], ip[2], s.hk, s.hbits, ip[3],
                      ip[4], ip[5], s.vk, s.vbits, out, stream);
  } else {
    launch_bilinear (di, dp, reinterpret_cast<const int *> (d + s.off[0]),
                     reinterpret_cast<const int *> (d + s.off[1]),
                     reinterpret_cast<const float *> (d + s.off[2]),
                     reinterpret_cast<const int *> (d + s.off[3]),
                     reinterpret_cast<const int *> (d + s.off[4]),
                     reinterpret_cast<const float *> (d + s.off[5]), out, stream);
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

} // namespace pi0::prep
