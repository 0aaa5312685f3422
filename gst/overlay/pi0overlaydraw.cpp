/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "gst/overlay/pi0overlaydraw.h"

#include "common/pi0cairo.h"

#include <cairo.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace pi0::overlay
{

namespace
{

/* Eight colours that stay apart on camera images (and from each other). */
const double kPalette[8][3] = {{1.0, 0.85, 0.1}, {0.2, 0.9, 1.0},  {1.0, 0.35, 0.8},
                               {0.5, 1.0, 0.3},  {1.0, 0.55, 0.2}, {0.6, 0.6, 1.0},
                               {1.0, 1.0, 1.0},  {0.9, 0.3, 0.3}};

bool
row_finite (const Chunk &c, unsigned r)
{
  for (unsigned j = 0; j < c.dim; j++)
    if (!std::isfinite (c.actions[(size_t)r * c.dim + j]))
      return false;
  return true;
}

/* A cairo context on the frame, or null with *error. */
CairoPtr
open_frame (uint8_t *data, int width, int height, int stride, bool alpha, CairoSurfacePtr *surface,
            std::string *error)
{
  const cairo_format_t fmt = alpha ? CAIRO_FORMAT_ARGB32 : CAIRO_FORMAT_RGB24;
  if (stride < cairo_format_stride_for_width (fmt, width)) {
    *error = "the frame's stride is too small for cairo";
    return nullptr;
  }
  surface->reset (cairo_image_surface_create_for_data (data, fmt, width, height, stride));
  if (cairo_surface_status (surface->get ()) != CAIRO_STATUS_SUCCESS) {
    *error = cairo_status_to_string (cairo_surface_status (surface->get ()));
    return nullptr;
  }
  CairoPtr cr (cairo_create (surface->get ()));
  if (cairo_status (cr.get ()) != CAIRO_STATUS_SUCCESS) {
    *error = cairo_status_to_string (cairo_status (cr.get ()));
    return nullptr;
  }
  return cr;
}

bool
close_frame (CairoPtr cr, CairoSurfacePtr surface, std::string *error)
{
  const cairo_status_t st = cairo_status (cr.get ());
  cr.reset ();
  cairo_surface_flush (surface.get ());
  if (st != CAIRO_STATUS_SUCCESS) {
    *error = cairo_status_to_string (st);
    return false;
  }
  return true;
}

} // namespace

bool
parse_numbers (const std::string &text, const char *what, std::vector<double> *out,
               std::string *error)
{
  out->clear ();
  size_t i = 0;
  while (i < text.size ()) {
    while (i < text.size () && (text[i] == ',' || text[i] == ' ' || text[i] == '\t'))
      i++;
    if (i >= text.size ())
      break;
    const char *start = text.c_str () + i;
    char *end = nullptr;
    errno = 0;
    const double v = std::strtod (start, &end);
    if (end == start || errno == ERANGE || !std::isfinite (v) ||
        (*end != '\0' && *end != ',' && *end != ' ' && *end != '\t')) {
      *error = std::string (what) + ": \"" + text + "\" is not a list of finite numbers";
      return false;
    }
    out->push_back (v);
    i = (size_t)(end - text.c_str ());
  }
  return true;
}

void
planar_tool (const std::vector<double> &links, const float *q, double *x, double *y)
{
  double a = 0;
  *x = *y = 0;
  for (size_t i = 0; i < links.size (); i++) {
    a += q[i];
    *x += links[i] * std::cos (a);
    *y += links[i] * std::sin (a);
  }
}

bool
draw_plot (uint8_t *data, int width, int height, int stride, bool alpha, const Chunk &chunk,
           const Style &style, std::string *error)
{
  CairoSurfacePtr surface;
  CairoPtr cr = open_frame (data, width, height, stride, alpha, &surface, error);
  if (!cr)
    return false;
  const double bx = std::floor (0.02 * width), bw = std::max (8.0, std::round (width / 3.0));
  const double bh = std::max (8.0, std::round (height / 4.0));
  const double by = std::floor (height - bh - 0.02 * height);
  cairo_set_source_rgba (cr.get (), 0, 0, 0, 0.55);
  cairo_rectangle (cr.get (), bx, by, bw, bh);
  cairo_fill (cr.get ());
  const double lw = std::max (1.0, height / 240.0);
  cairo_set_line_width (cr.get (), lw);
  cairo_set_line_join (cr.get (), CAIRO_LINE_JOIN_ROUND);
  const unsigned n = chunk.horizon;
  for (unsigned j = 0; j < chunk.dim; j++) {
    double lo, hi;
    if (j < style.lower.size () && j < style.upper.size ()) {
      lo = style.lower[j];
      hi = style.upper[j];
    } else {
      lo = INFINITY;
      hi = -INFINITY;
      for (unsigned r = 0; r < n; r++)
        if (row_finite (chunk, r)) {
          lo = std::min (lo, (double)chunk.actions[(size_t)r * chunk.dim + j]);
          hi = std::max (hi, (double)chunk.actions[(size_t)r * chunk.dim + j]);
        }
      if (!std::isfinite (lo))
        continue; /* no finite row */
    }
    if (!(hi > lo)) {
      lo -= 1;
      hi += 1;
    }
    const double *c = kPalette[j % 8];
    cairo_set_source_rgb (cr.get (), c[0], c[1], c[2]);
    bool pen = false;
    for (unsigned r = 0; r < n; r++) {
      if (!row_finite (chunk, r)) {
        pen = false;
        continue;
      }
      double v = (chunk.actions[(size_t)r * chunk.dim + j] - lo) / (hi - lo);
      v = std::clamp (v, 0.0, 1.0);
      const double x = bx + lw + (bw - 2 * lw) * (n > 1 ? (double)r / (n - 1) : 0.5);
      const double y = by + lw + (bh - 2 * lw) * (1 - v);
      if (pen)
        cairo_line_to (cr.get (), x, y);
      else
        cairo_move_to (cr.get (), x, y);
      pen = true;
    }
    cairo_stroke (cr.get ());
  }
  return close_frame (std::move (cr), std::move (surface), error);
}

bool
draw_planar (uint8_t *data, int width, int height, int stride, bool alpha, const Chunk &chunk,
             const Style &style, std::string *error)
{
  if (style.links.size () > chunk.dim) {
    *error = "the chunk has " + std::to_string (chunk.dim) + " joints, links names " +
             std::to_string (style.links.size ());
    return false;
  }
  CairoSurfacePtr surface;
  CairoPtr cr = open_frame (data, width, height, stride, alpha, &surface, error);
  if (!cr)
    return false;
  const auto &p = style.projection;
  std::vector<std::array<double, 2>> pts;
  std::vector<bool> breaks;
  for (unsigned r = 0; r < chunk.horizon; r++) {
    if (!row_finite (chunk, r)) {
      if (!pts.empty ())
        breaks.back () = true;
      continue;
    }
    double x, y;
    planar_tool (style.links, &chunk.actions[(size_t)r * chunk.dim], &x, &y);
    pts.push_back ({p[0] * x + p[1] * y + p[2], p[3] * x + p[4] * y + p[5]});
    breaks.push_back (false);
  }
  if (pts.empty ())
    return close_frame (std::move (cr), std::move (surface), error);
  const double lw = std::max (1.0, std::min (width, height) / 120.0);
  cairo_set_line_join (cr.get (), CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap (cr.get (), CAIRO_LINE_CAP_ROUND);
  /* A dark edge under the line, so that it reads on any background. */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0)
      cairo_set_source_rgba (cr.get (), 0, 0, 0, 0.7);
    else
      cairo_set_source_rgb (cr.get (), kPalette[0][0], kPalette[0][1], kPalette[0][2]);
    cairo_set_line_width (cr.get (), pass == 0 ? 2.5 * lw : lw);
    cairo_move_to (cr.get (), pts[0][0], pts[0][1]);
    for (size_t i = 1; i < pts.size (); i++) {
      if (breaks[i - 1])
        cairo_move_to (cr.get (), pts[i][0], pts[i][1]);
      else
        cairo_line_to (cr.get (), pts[i][0], pts[i][1]);
    }
    if (pts.size () == 1)
      cairo_line_to (cr.get (), pts[0][0], pts[0][1]); /* a dot (round caps) */
    cairo_stroke (cr.get ());
  }
  /* The row the robot runs first, ringed; the last, a dot. */
  cairo_set_source_rgb (cr.get (), kPalette[1][0], kPalette[1][1], kPalette[1][2]);
  cairo_set_line_width (cr.get (), lw);
  cairo_arc (cr.get (), pts[0][0], pts[0][1], 2.5 * lw, 0, 2 * M_PI);
  cairo_stroke (cr.get ());
  cairo_set_source_rgb (cr.get (), kPalette[2][0], kPalette[2][1], kPalette[2][2]);
  cairo_arc (cr.get (), pts.back ()[0], pts.back ()[1], 2 * lw, 0, 2 * M_PI);
  cairo_fill (cr.get ());
  return close_frame (std::move (cr), std::move (surface), error);
}

} // namespace pi0::overlay
