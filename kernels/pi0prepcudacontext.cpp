/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* PrimaryContext: the device's primary context, retained through the CUDA driver API, which is
 * looked up at run time (dlopen of libcuda.so.1) so that a build with CUDA still loads and runs
 * on the CPU where there is no driver. */

#include "kernels/pi0prepcuda.h"

#include <mutex>

#include <dlfcn.h>

namespace pi0::prep
{

namespace
{

/* The two driver entry points, from libcuda.so.1 when there is one. */
struct DriverApi {
  int (*primary_retain) (void **ctx, int dev) = nullptr;
  int (*primary_release) (int dev) = nullptr;
  bool ok = false;

  static const DriverApi &get ()
  {
    static DriverApi api;
    static std::once_flag once;
    std::call_once (once, [] {
      void *lib = dlopen ("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib)
        return;
      api.primary_retain =
          reinterpret_cast<int (*) (void **, int)> (dlsym (lib, "cuDevicePrimaryCtxRetain"));
      api.primary_release =
          reinterpret_cast<int (*) (int)> (dlsym (lib, "cuDevicePrimaryCtxRelease_v2"));
      if (!api.primary_release)
        api.primary_release =
            reinterpret_cast<int (*) (int)> (dlsym (lib, "cuDevicePrimaryCtxRelease"));
      api.ok = api.primary_retain && api.primary_release;
    });
    return api;
  }
};

} // namespace

bool
PrimaryContext::retain (int device)
{
  reset ();
  const DriverApi &drv = DriverApi::get ();
  if (!drv.ok || drv.primary_retain (&ctx_, device) != 0) {
    ctx_ = nullptr;
    return false;
  }
  device_ = device;
  return true;
}

void
PrimaryContext::reset ()
{
  if (ctx_)
    DriverApi::get ().primary_release (device_);
  ctx_ = nullptr;
}

} // namespace pi0::prep
