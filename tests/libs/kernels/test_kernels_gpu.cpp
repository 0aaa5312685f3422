/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0prep's CUDA path against its CPU twin and the plain reference (suite 'gpu': skips itself
 * without a CUDA device). */

#include "kernels/pi0prepcuda.h"
#include "tests/pi0testprepcases.h"
#include "tests/pi0testprepreference.h"

#include <gtest/gtest.h>

#include <glib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace pi0::prep;

namespace
{

bool
have_device ()
{
  int n = 0;
  return cudaGetDeviceCount (&n) == cudaSuccess && n > 0;
}

#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    ASSERT_EQ (err_, cudaSuccess) << #call << ": " << cuda_error_text (err_);                      \
  } while (0)

/* Copies a host frame's planes to the device; the returned Image points at device memory. */
struct DeviceFrame {
  DeviceBuffer planes[3];
  Image image;
};

void
upload (const pi0test::Frame &f, DeviceFrame &d)
{
  d.image = f.image ();
  for (int p = 0; p < format_n_planes (f.format); p++) {
    CUDA_OK (d.planes[p].ensure (f.planes[p].size ()));
    CUDA_OK (cudaMemcpy (d.planes[p].data (), f.planes[p].data (), f.planes[p].size (),
                         cudaMemcpyHostToDevice));
    d.image.planes[p] = d.planes[p].data ();
  }
}

} // namespace

TEST (Pi0PrepGpu, EqualsCpuForEveryFormatModeAndDtype)
{
  if (!have_device ())
    GTEST_SKIP () << "no CUDA device";
  std::mt19937 rng (2024);
  const Format formats[] = {Format::RGB,  Format::BGR,  Format::RGBx, Format::BGRx,
                            Format::xRGB, Format::ABGR, Format::RGBA, Format::GRAY8,
                            Format::NV12, Format::I420, Format::NV21, Format::YV12,
                            Format::Y42B, Format::Y444, Format::YUY2, Format::UYVY};
  CudaPrep prep (3);
  CudaStream streams[3];
  for (auto &s : streams)
    CUDA_OK (s.create ());
  const cudaStream_t ss[3] = {streams[0].get (), streams[1].get (), streams[2].get ()};
  for (Format fmt : formats)
    for (Resize rs : {Resize::Pad, Resize::Stretch, Resize::Crop})
      for (Filter filt : {Filter::Antialias, Filter::Pil, Filter::Bilinear})
        for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
          Params p;
          p.resize = rs;
          p.filter = filt;
          p.dtype = dt;
          pi0test::Frame frames[2] = {pi0test::random_frame (rng, fmt, 1921, 1079),
                                      pi0test::random_frame (rng, fmt, 131, 97)};
          DeviceFrame dev[2];
          upload (frames[0], dev[0]);
          upload (frames[1], dev[1]);
          Image host_ims[3] = {frames[0].image (), Image (), frames[1].image ()};
          Image dev_ims[3] = {dev[0].image, Image (), dev[1].image};
          const size_t vb = view_bytes (p);
          std::vector<uint8_t> cpu (3 * vb), gpu (3 * vb, 0xEE);
          prep_cpu (p, host_ims, 3, cpu.data (), nullptr);
          DeviceBuffer out;
          CUDA_OK (out.ensure (3 * vb));
          CUDA_OK (prep_cuda (p, dev_ims, 3, out.data (), ss, prep));
          for (auto s : ss)
            CUDA_OK (cudaStreamSynchronize (s));
          CUDA_OK (cudaMemcpy (gpu.data (), out.data (), 3 * vb, cudaMemcpyDeviceToHost));
          size_t bad = 0;
          double worst = 0;
          const size_t n = 3 * vb / dtype_size (dt);
          for (size_t i = 0; i < n; i++) {
            double a = pi0test::out_value (p, cpu.data (), i);
            double b = pi0test::out_value (p, gpu.data (), i);
            double d = std::fabs (a - b);
            worst = std::max (worst, d);
            bad += d > pi0test::tolerance (p, a);
          }
          EXPECT_EQ (bad, 0u) << format_name (fmt) << " resize=" << int (rs)
                              << " filter=" << int (filt) << " dtype=" << int (dt) << " worst "
                              << worst;
          /* And the second view against the plain reference directly. */
          if ((fmt == Format::NV12 || fmt == Format::YUY2) && dt == DType::Float32) {
            std::vector<double> ref = pi0test::reference (p, &frames[1]);
            for (size_t i = 0; i < ref.size (); i++)
              ASSERT_NEAR (pi0test::out_value (p, gpu.data () + 2 * vb, i), ref[i], 1e-3);
          }
        }
}

TEST (Pi0PrepGpu, MaskedViewIsPadValue)
{
  if (!have_device ())
    GTEST_SKIP () << "no CUDA device";
  Params p;
  CudaPrep prep (1);
  CudaStream s;
  CUDA_OK (s.create ());
  DeviceBuffer out;
  CUDA_OK (out.ensure (view_bytes (p)));
  CUDA_OK (cudaMemset (out.data (), 0x55, view_bytes (p)));
  Image masked;
  CUDA_OK (prep.run_view (p, 0, masked, out.data (), s.get ()));
  CUDA_OK (cudaStreamSynchronize (s.get ()));
  std::vector<float> host (3 * 224 * 224);
  CUDA_OK (cudaMemcpy (host.data (), out.data (), view_bytes (p), cudaMemcpyDeviceToHost));
  for (float v : host)
    ASSERT_EQ (v, -1.f);
}

namespace
{

/* Runs @c on the CUDA path (one view, slot 0 of @prep); leaves the output in @host. */
void
run_case_cuda (const pi0test::PrepCase &c, const pi0test::Frame &f, CudaPrep &prep,
               cudaStream_t stream, std::vector<uint8_t> &host)
{
  DeviceFrame dev;
  upload (f, dev);
  const size_t vb = view_bytes (c.params);
  DeviceBuffer out;
  CUDA_OK (out.ensure (vb));
  CUDA_OK (cudaMemset (out.data (), 0xAB, vb));
  CUDA_OK (prep.run_view (c.params, 0, dev.image, out.data (), stream));
  CUDA_OK (cudaStreamSynchronize (stream));
  host.assign (vb, 0);
  CUDA_OK (cudaMemcpy (host.data (), out.data (), vb, cudaMemcpyDeviceToHost));
}

} // namespace

/* The CPU suite's property cases (test_kernels: Pi0Prep.AnySizeMatchesReference) on the CUDA
 * path: random sizes, formats, modes, filters and dtypes, and the extreme ratios (8K -> 1x1,
 * 2x2500, 65536-wide...), which take the two-pass fallback where a tile's source span does not
 * fit in shared memory. Against the reference and the CPU path. */
TEST (Pi0PrepGpu, AnySizeMatchesReferenceAndCpu)
{
  if (!have_device ())
    GTEST_SKIP () << "no CUDA device";
  const char *env = g_getenv ("PI0_PREP_SEED");
  const unsigned seed = env ? unsigned (std::strtoul (env, nullptr, 10)) : std::random_device () ();
  SCOPED_TRACE ("PI0_PREP_SEED=" + std::to_string (seed));
  std::printf ("PI0_PREP_SEED=%u\n", seed);
  std::mt19937 rng (seed);
  std::vector<pi0test::PrepCase> cases = pi0test::extreme_cases ();
  for (const auto &c : pi0test::random_cases (rng, 60))
    cases.push_back (c);
  pi0test::FrameCache frames (seed);
  CudaPrep prep (1);
  CudaStream stream;
  CUDA_OK (stream.create ());
  std::vector<uint8_t> gpu, cpu;
  for (const pi0test::PrepCase &c : cases) {
    SCOPED_TRACE (pi0test::describe (c));
    const pi0test::Frame &f = frames.get (c.format, c.width, c.height);
    run_case_cuda (c, f, prep, stream.get (), gpu);
    if (HasFatalFailure ())
      return;
    double worst = 0;
    EXPECT_EQ (pi0test::count_mismatches (c.params, f, gpu.data (), worst), 0u)
        << "against the reference: worst error " << worst;
    const Image im = f.image ();
    cpu.assign (gpu.size (), 0xCD);
    prep_cpu (c.params, &im, 1, cpu.data (), nullptr);
    size_t bad = 0;
    const size_t n = gpu.size () / dtype_size (c.params.dtype);
    for (size_t i = 0; i < n; i++) {
      const double a = pi0test::out_value (c.params, cpu.data (), i);
      bad += std::fabs (a - pi0test::out_value (c.params, gpu.data (), i)) >
             pi0test::tolerance (c.params, a);
    }
    EXPECT_EQ (bad, 0u) << "against the CPU path";
  }
}

/* normalize=pi0 on the CUDA path is openpi's float32 x / 255 * 2 - 1 bit for bit on all 256
 * levels, for every filter and dtype; ImageNet is torchvision's float32 order. */
TEST (Pi0PrepGpu, NormalizationIsOpenpisFloat32OnAll256Levels)
{
  if (!have_device ())
    GTEST_SKIP () << "no CUDA device";
  const pi0test::Frame f = pi0test::levels_frame ();
  CudaPrep prep (1);
  CudaStream stream;
  CUDA_OK (stream.create ());
  std::vector<uint8_t> out;
  const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
  for (Filter filt : {Filter::Antialias, Filter::Pil, Filter::Bilinear})
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
      for (bool imagenet : {false, true}) {
        pi0test::PrepCase c =
            pi0test::make_case (Format::RGB, 16, 16, 16, 16, filt, Resize::Pad, dt);
        if (imagenet) {
          std::memcpy (c.params.mean, m, sizeof m);
          std::memcpy (c.params.std, s, sizeof s);
        }
        run_case_cuda (c, f, prep, stream.get (), out);
        if (HasFatalFailure ())
          return;
        std::string first;
        const int bad = imagenet
                            ? pi0test::count_level_mismatches (
                                  c.params, out.data (),
                                  [&] (int v, int ch) {
                                    return pi0test::torchvision_normalize (v, m[ch], s[ch]);
                                  },
                                  first)
                            : pi0test::count_level_mismatches (
                                  c.params, out.data (),
                                  [] (int v, int) { return pi0test::openpi_normalize (v); }, first);
        EXPECT_EQ (bad, 0) << pi0test::describe (c) << ": " << first;
      }
}
