/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-prep-cpu-time: the CPU path of pi0prep, serial, timed in thread CPU time rather than wall
 * time, so that other processes on a shared machine (which stretch wall time, see perf.md)
 * barely move the numbers. Three 1920x1080 views (RGB and NV12, the frames of pi0-prep-bench)
 * -> [3,3,224,224] float32, resize=pad, normalize=pi0, for each filter. Prints a table; never
 * asserts anything. Uses only the pi0prep API, so it also builds against older kernels for
 * before/after comparisons.
 *
 * usage: pi0-prep-cpu-time [--iterations N] */

#include "kernels/pi0prep.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

using namespace pi0::prep;

namespace
{

double
thread_cpu_ms ()
{
  timespec t;
  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

const char *
filter_name (Filter f)
{
  return f == Filter::Antialias ? "antialias" : f == Filter::Pil ? "pil" : "bilinear";
}

} // namespace

int
main (int argc, char **argv)
{
  int iters = 60;
  for (int i = 1; i < argc; i++)
    if (!std::strcmp (argv[i], "--iterations") && i + 1 < argc)
      iters = std::max (1, std::atoi (argv[++i]));
  constexpr int kW = 1920, kH = 1080, kViews = 3;
  std::printf ("pi0-prep-cpu-time: 3 views 1920x1080 -> 3x3x224x224 float32, serial, thread CPU "
               "time, %d iterations (pil: %d)\n",
               iters, std::max (1, iters / 4));
  std::printf ("| %-6s | %-9s | %12s | %12s\n", "input", "filter", "median ms", "min ms");
  std::printf ("|--------|-----------|--------------|-------------\n");
  for (Format f : {Format::RGB, Format::NV12}) {
    /* pi0-prep-bench's frames: a smooth picture with noise. */
    std::vector<uint8_t> data[kViews];
    Image img[kViews];
    std::mt19937 rng (42);
    for (int v = 0; v < kViews; v++) {
      const size_t n = f == Format::NV12 ? size_t (kW) * kH * 3 / 2 : size_t (kW) * kH * 3;
      data[v].resize (n);
      for (size_t i = 0; i < n; i++)
        data[v][i] = uint8_t ((i * 7 / 3 + v * 50) % 256 / 2 + (rng () & 127));
      img[v].format = f;
      img[v].width = kW;
      img[v].height = kH;
      img[v].planes[0] = data[v].data ();
      if (f == Format::NV12) {
        img[v].strides[0] = img[v].strides[1] = kW;
        img[v].planes[1] = data[v].data () + size_t (kW) * kH;
        img[v].yuv = make_yuv_matrix (0.2126, 0.0722, false);
      } else {
        img[v].strides[0] = size_t (kW) * 3;
      }
    }
    for (Filter filt : {Filter::Antialias, Filter::Pil, Filter::Bilinear}) {
      Params p;
      p.filter = filt;
      std::vector<float> out (kViews * 3 * 224 * 224);
      const int n = filt == Filter::Pil ? std::max (1, iters / 4) : iters;
      std::vector<double> t;
      for (int i = 0; i < n + 3; i++) { /* 3 warm-up runs */
        const double t0 = thread_cpu_ms ();
        prep_cpu (p, img, kViews, out.data (), nullptr);
        if (i >= 3)
          t.push_back (thread_cpu_ms () - t0);
      }
      std::sort (t.begin (), t.end ());
      std::printf ("| %-6s | %-9s | %12.3f | %12.3f\n", format_name (f), filter_name (filt),
                   t[t.size () / 2], t[0]);
    }
  }
  return 0;
}
