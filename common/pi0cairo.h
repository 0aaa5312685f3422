/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Owning pointers for cairo's surfaces and contexts, for the two places that draw with cairo:
 * the simulated world's cameras (sim/) and pi0overlay (gst/overlay/). Header-only, and only
 * for targets that link cairo themselves: common/ does not. */
#pragma once

#include <cairo.h>

#include <memory>

namespace pi0
{

struct CairoSurfaceDeleter {
  void operator() (cairo_surface_t *s) const { cairo_surface_destroy (s); }
};
struct CairoDeleter {
  void operator() (cairo_t *c) const { cairo_destroy (c); }
};
using CairoSurfacePtr = std::unique_ptr<cairo_surface_t, CairoSurfaceDeleter>;
using CairoPtr = std::unique_ptr<cairo_t, CairoDeleter>;

} // namespace pi0
