/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0prep's CUDA path against its CPU twin and the plain reference (suite 'gpu': skips itself
 * without a CUDA device). */

#include "pi0prep_cuda.h"
#include "prep_reference.h"

#include <gtest/gtest.h>

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
