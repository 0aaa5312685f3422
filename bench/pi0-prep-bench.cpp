/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-prep-bench: per-observation time of three 1920x1080 views (RGB and NV12) -> [3,3,224,224]
 * float32 (openpi resize-with-pad, PIL-bilinear antialias, x/255*2-1), for our CPU path, a
 * single-threaded serial run of it, stock GStreamer (videoconvertscale method=bilinear2 per
 * view, then a plain normalize loop), and the CUDA path when a device is present; then one
 * view at the extreme ratios of issue 16 (long filters: the CPU path's bounded slow path).
 * Prints tables; never asserts anything.
 *
 * usage: pi0-prep-bench [--iterations N] [--threads N] [--cuda-only]
 *   --cuda-only: only the CUDA rows (scripts/gpu-check.sh); exits 1 when there are none (no
 *   CUDA build or no device). */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "kernels/pi0prep.h"
#ifdef HAVE_CUDA
#include "kernels/pi0prepcuda.h"
#endif

#include <gst/check/gstharness.h>
#include <gst/gst.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace pi0::prep;
using Clock = std::chrono::steady_clock;

namespace
{

constexpr int kW = 1920, kH = 1080, kViews = 3;

struct Row {
  std::string path, format;
  double median_ms, min_ms;
  std::string note;
};

/* Median and minimum of n timed runs after 3 warm-up runs. */
void
measure (int n, const std::function<void ()> &fn, double &median, double &minimum)
{
  for (int i = 0; i < 3; i++)
    fn ();
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    auto t0 = Clock::now ();
    fn ();
    t.push_back (std::chrono::duration<double, std::milli> (Clock::now () - t0).count ());
  }
  std::sort (t.begin (), t.end ());
  median = t[t.size () / 2];
  minimum = t[0];
}

struct Frames {
  std::vector<uint8_t> data[kViews];
  Image img[kViews];
};

/* A smooth picture with noise, so nothing is trivially compressible or constant. */
Frames
make_frames (Format f)
{
  Frames fr;
  std::mt19937 rng (42);
  for (int v = 0; v < kViews; v++) {
    const size_t n = f == Format::NV12 ? size_t (kW) * kH * 3 / 2 : size_t (kW) * kH * 3;
    fr.data[v].resize (n);
    for (size_t i = 0; i < n; i++)
      fr.data[v][i] = uint8_t ((i * 7 / 3 + v * 50) % 256 / 2 + (rng () & 127));
    Image &im = fr.img[v];
    im.format = f;
    im.width = kW;
    im.height = kH;
    im.planes[0] = fr.data[v].data ();
    if (f == Format::NV12) {
      im.strides[0] = im.strides[1] = kW;
      im.planes[1] = fr.data[v].data () + size_t (kW) * kH;
      im.yuv = make_yuv_matrix (0.2126, 0.0722, false);
    } else {
      im.strides[0] = size_t (kW) * 3;
    }
  }
  return fr;
}

/* videoconvertscale through a GstHarness: one harness per view, run one after another as a
 * pipeline with three branches on one core would. */
struct StockScaler {
  GstHarness *h[kViews] = {nullptr, nullptr, nullptr};
  GstBuffer *in[kViews] = {nullptr, nullptr, nullptr};

  StockScaler (const Frames &fr, const char *fmt, int out_w, int out_h, int threads)
  {
    for (int v = 0; v < kViews; v++) {
      gchar *desc = g_strdup_printf ("videoconvertscale method=bilinear2 n-threads=%d", threads);
      h[v] = gst_harness_new_parse (desc);
      g_free (desc);
      gchar *src = g_strdup_printf ("video/x-raw,format=%s,width=%d,height=%d,framerate=30/1,"
                                    "pixel-aspect-ratio=1/1",
                                    fmt, kW, kH);
      gchar *sink = g_strdup_printf ("video/x-raw,format=RGB,width=%d,height=%d,"
                                     "pixel-aspect-ratio=1/1",
                                     out_w, out_h);
      gst_harness_set_src_caps_str (h[v], src);
      gst_harness_set_sink_caps_str (h[v], sink);
      g_free (src);
      g_free (sink);
      in[v] = gst_buffer_new_memdup (fr.data[v].data (), fr.data[v].size ());
    }
  }
  ~StockScaler ()
  {
    for (int v = 0; v < kViews; v++) {
      gst_buffer_unref (in[v]);
      gst_harness_teardown (h[v]);
    }
  }
  /* Returns the three outputs (caller unrefs). */
  void run (GstBuffer *out[kViews])
  {
    for (int v = 0; v < kViews; v++) {
      gst_harness_push (h[v], gst_buffer_ref (in[v]));
      out[v] = gst_harness_pull (h[v]);
    }
  }
};

/* The plain normalize that follows videoconvertscale in the stock path: HWC uint8 -> CHW float. */
void
normalize_rgb (const uint8_t *rgb, float *out, int w, int h)
{
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++)
        out[(size_t (c) * h + y) * w + x] = rgb[(size_t (y) * w + x) * 3 + c] / 127.5f - 1.f;
}

} // namespace

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  int iters = 30;
  int threads = std::max (1u, std::thread::hardware_concurrency ());
  bool cuda_only = false;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp (argv[i], "--iterations") && i + 1 < argc)
      iters = std::atoi (argv[++i]);
    else if (!std::strcmp (argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi (argv[++i]);
    else if (!std::strcmp (argv[i], "--cuda-only"))
      cuda_only = true;
  }

  std::vector<Row> rows;
  Params p;
  std::vector<float> out (kViews * 3 * 224 * 224);
  ThreadPool pool (threads);

  for (Format f : {Format::RGB, Format::NV12}) {
    Frames fr = make_frames (f);
    const char *fname = format_name (f);
    double med, mn;

    if (!cuda_only) {
      measure (
          iters, [&] { prep_cpu (p, fr.img, kViews, out.data (), &pool); }, med, mn);
      rows.push_back ({"cudaprep CPU (" + std::to_string (threads) + " threads)", fname, med, mn,
                       "antialias pad, float32 [3,3,224,224]"});
      measure (
          iters, [&] { prep_cpu (p, fr.img, kViews, out.data (), nullptr); }, med, mn);
      rows.push_back ({"cudaprep CPU serial (1 thread)", fname, med, mn, "same output"});

      {
        StockScaler s (fr, fname, 224, 224, 1);
        measure (
            iters,
            [&] {
              GstBuffer *o[kViews];
              s.run (o);
              for (int v = 0; v < kViews; v++) {
                GstMapInfo map;
                gst_buffer_map (o[v], &map, GST_MAP_READ);
                normalize_rgb (map.data, out.data () + v * 3 * 224 * 224, 224, 224);
                gst_buffer_unmap (o[v], &map);
                gst_buffer_unref (o[v]);
              }
            },
            med, mn);
        rows.push_back ({"videoconvertscale bilinear2 + normalize", fname, med, mn,
                         "letterboxed 224x224 (add-borders), 1 thread"});
        measure (
            iters,
            [&] {
              GstBuffer *o[kViews];
              s.run (o);
              for (auto *b : o)
                gst_buffer_unref (b);
            },
            med, mn);
        rows.push_back ({"videoconvertscale bilinear2 alone", fname, med, mn,
                         "224x224 RGB, no normalize, 1 thread"});
      }
      {
        StockScaler s (fr, fname, 224, 224, threads);
        measure (
            iters,
            [&] {
              GstBuffer *o[kViews];
              s.run (o);
              for (auto *b : o)
                gst_buffer_unref (b);
            },
            med, mn);
        rows.push_back ({"videoconvertscale bilinear2 alone", fname, med, mn,
                         "224x224 RGB, n-threads=" + std::to_string (threads)});
      }
    }

#ifdef HAVE_CUDA
    int ndev = 0;
    if (cudaGetDeviceCount (&ndev) == cudaSuccess && ndev > 0) {
      CudaPrep prep (kViews);
      CudaStream streams[kViews];
      CudaEvent start[kViews], done[kViews];
      PinnedBuffer pinned[kViews];
      DeviceBuffer dev_in[kViews], dev_out;
      cudaStream_t ss[kViews];
      Image dev_img[kViews];
      bool ok = dev_out.ensure (kViews * view_bytes (p)) == cudaSuccess;
      for (int v = 0; v < kViews && ok; v++) {
        ok = streams[v].create () == cudaSuccess && start[v].create (true) == cudaSuccess &&
             done[v].create (true) == cudaSuccess &&
             pinned[v].ensure (fr.data[v].size ()) == cudaSuccess &&
             dev_in[v].ensure (fr.data[v].size ()) == cudaSuccess;
        if (!ok)
          break;
        ss[v] = streams[v].get ();
        dev_img[v] = fr.img[v];
        const uint8_t *base = fr.data[v].data ();
        dev_img[v].planes[0] = dev_in[v].data ();
        if (f == Format::NV12)
          dev_img[v].planes[1] = dev_in[v].data () + (fr.img[v].planes[1] - base);
        cudaMemcpy (dev_in[v].data (), base, fr.data[v].size (), cudaMemcpyHostToDevice);
      }
      /* The first CUDA error of a row's runs: such a row has no time. */
      cudaError_t err = cudaSuccess;
      auto check = [&err] (cudaError_t e) {
        if (err == cudaSuccess)
          err = e;
      };
      auto cuda_row = [&] (const char *path, std::string note) {
        check (cudaDeviceSynchronize ());
        check (cudaGetLastError ());
        if (err != cudaSuccess)
          rows.push_back (
              {path, fname, 0, 0, std::string ("CUDA error: ") + cudaGetErrorString (err)});
        else
          rows.push_back ({path, fname, med, mn, note});
        err = cudaSuccess;
      };
      if (ok) {
        double per_stream[kViews] = {0, 0, 0};
        /* From system memory: copy into pinned staging, upload and run on each view's stream. */
        measure (
            iters,
            [&] {
              for (int v = 0; v < kViews; v++) {
                std::memcpy (pinned[v].data (), fr.data[v].data (), fr.data[v].size ());
                cudaEventRecord (start[v].get (), ss[v]);
                check (cudaMemcpyAsync (dev_in[v].data (), pinned[v].data (), fr.data[v].size (),
                                        cudaMemcpyHostToDevice, ss[v]));
                check (
                    prep.run_view (p, v, dev_img[v], dev_out.data () + v * view_bytes (p), ss[v]));
                cudaEventRecord (done[v].get (), ss[v]);
              }
              for (int v = 0; v < kViews; v++)
                cudaEventSynchronize (done[v].get ());
            },
            med, mn);
        std::string note = "incl. memcpy to pinned + upload; per stream ms:";
        for (int v = 0; v < kViews; v++) {
          float ms = 0;
          cudaEventElapsedTime (&ms, start[v].get (), done[v].get ());
          per_stream[v] = ms;
          char b[32];
          std::snprintf (b, sizeof b, " %.3f", per_stream[v]);
          note += b;
        }
        cuda_row ("cudaprep CUDA, system memory", note);
        /* From device memory (as from nvcodec): kernels only. */
        measure (
            iters,
            [&] {
              for (int v = 0; v < kViews; v++) {
                cudaEventRecord (start[v].get (), ss[v]);
                check (
                    prep.run_view (p, v, dev_img[v], dev_out.data () + v * view_bytes (p), ss[v]));
                cudaEventRecord (done[v].get (), ss[v]);
              }
              for (int v = 0; v < kViews; v++)
                cudaEventSynchronize (done[v].get ());
            },
            med, mn);
        note = "kernels only; per stream ms:";
        for (int v = 0; v < kViews; v++) {
          float ms = 0;
          cudaEventElapsedTime (&ms, start[v].get (), done[v].get ());
          char b[32];
          std::snprintf (b, sizeof b, " %.3f", ms);
          note += b;
        }
        cuda_row ("cudaprep CUDA, CUDA memory", note);
      } else {
        rows.push_back ({"cudaprep CUDA", fname, 0, 0, "CUDA setup failed"});
      }
    }
#endif
  }

  int cuda_rows = 0;
  for (auto &r : rows)
    cuda_rows += r.path.rfind ("cudaprep CUDA", 0) == 0 && r.median_ms > 0;
  if (cuda_only && cuda_rows == 0) {
    std::fprintf (stderr, "pi0-prep-bench: --cuda-only, but no CUDA row (%s)\n",
#ifdef HAVE_CUDA
                  "no CUDA device, or its setup failed"
#else
                  "built without CUDA"
#endif
    );
    return 1;
  }
  std::printf ("pi0-prep-bench: 3 views 1920x1080 -> 3x3x224x224, %d iterations, %u hw threads\n",
               iters, std::thread::hardware_concurrency ());
  std::printf ("| %-42s | %-6s | %10s | %10s | %s\n", "path", "input", "median ms", "min ms",
               "note");
  std::printf ("|%s|%s|%s|%s|%s\n", std::string (44, '-').c_str (), std::string (8, '-').c_str (),
               std::string (12, '-').c_str (), std::string (12, '-').c_str (), "------");
  for (auto &r : rows)
    std::printf ("| %-42s | %-6s | %10.3f | %10.3f | %s\n", r.path.c_str (), r.format.c_str (),
                 r.median_ms, r.min_ms, r.note.c_str ());

  /* One view at extreme ratios, CPU path with the pool (filters longer than 128 taps take the
   * 32-bit grouped path; see docs/elements/cudaprep.md, Sizes). */
  struct Extreme {
    Format format;
    int w, h, ow, oh;
    Filter filter;
  } extremes[] = {
      {Format::RGB, 640, 480, 1, 1, Filter::Antialias},
      {Format::NV12, 7680, 4320, 32, 32, Filter::Antialias},
      {Format::NV12, 7680, 4320, 32, 32, Filter::Pil},
      {Format::RGB, 7680, 4320, 1, 1, Filter::Antialias},
      {Format::RGB, 7680, 4320, 224, 224, Filter::Antialias},
  };
  std::printf ("\npi0-prep-bench: one view at extreme ratios, CPU (%d threads), %d iterations\n",
               threads, std::max (3, iters / 10));
  std::printf ("| %-34s | %-9s | %10s | %10s\n", "view", "filter", "median ms", "min ms");
  std::printf ("|%s|%s|%s|%s\n", std::string (36, '-').c_str (), std::string (11, '-').c_str (),
               std::string (12, '-').c_str (), std::string (12, '-').c_str ());
  for (const Extreme &e : extremes) {
    const size_t n = e.format == Format::NV12 ? size_t (e.w) * e.h * 3 / 2 : size_t (e.w) * e.h * 3;
    std::vector<uint8_t> data (n);
    std::mt19937 rng (7);
    for (auto &b : data)
      b = uint8_t (rng ());
    Image im;
    im.format = e.format;
    im.width = e.w;
    im.height = e.h;
    im.planes[0] = data.data ();
    im.strides[0] = e.format == Format::NV12 ? size_t (e.w) : size_t (e.w) * 3;
    if (e.format == Format::NV12) {
      im.planes[1] = data.data () + size_t (e.w) * e.h;
      im.strides[1] = size_t (e.w);
      im.yuv = make_yuv_matrix (0.2126, 0.0722, false);
    }
    Params ep;
    ep.out_width = e.ow;
    ep.out_height = e.oh;
    ep.filter = e.filter;
    std::vector<uint8_t> o (view_bytes (ep));
    double med, mn;
    measure (
        std::max (3, iters / 10), [&] { prep_cpu (ep, &im, 1, o.data (), &pool); }, med, mn);
    const std::string view = std::string (format_name (e.format)) + " " + std::to_string (e.w) +
                             "x" + std::to_string (e.h) + " -> " + std::to_string (e.ow) + "x" +
                             std::to_string (e.oh);
    std::printf ("| %-34s | %-9s | %10.3f | %10.3f\n", view.c_str (),
                 e.filter == Filter::Pil ? "pil" : "antialias", med, mn);
  }
  return 0;
}
