/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "sim/pi0simrender.h"

#include "common/pi0cairo.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace pi0::sim
{

namespace
{

constexpr double kPi = 3.14159265358979323846;
constexpr double kArmHeight = 0.12;  /* the links move this high above the table, m */
constexpr double kLinkWidth = 0.035; /* m */
/* The table top, m. */
constexpr double kTableX0 = -0.65, kTableX1 = 0.65, kTableY0 = -0.10, kTableY1 = 0.75;

struct Rgb {
  double r, g, b;
};
const Rgb kFloor{0.22, 0.23, 0.25};
const Rgb kWall{0.47, 0.51, 0.55};
const Rgb kTable{0.80, 0.73, 0.59};
const Rgb kGrid{0.74, 0.67, 0.53};
const Rgb kShadow{0.62, 0.56, 0.45};
const Rgb kArm{0.36, 0.38, 0.42};
const Rgb kJoint{0.15, 0.15, 0.17};
const Rgb kTip{0.95, 0.95, 0.95};

void
set (cairo_t *cr, Rgb c, double shade = 1.0)
{
  cairo_set_source_rgb (cr, c.r * shade, c.g * shade, c.b * shade);
}

Rgb
block_rgb (const Block &b)
{
  return {b.rgb[0] / 255.0, b.rgb[1] / 255.0, b.rgb[2] / 255.0};
}

/* The table, its blocks and the arm seen from straight above, in table metres (the caller has
 * set the transform). */
void
draw_plan (cairo_t *cr, const World &w, double pixel)
{
  set (cr, kTable);
  cairo_rectangle (cr, kTableX0, kTableY0, kTableX1 - kTableX0, kTableY1 - kTableY0);
  cairo_fill (cr);
  set (cr, kGrid);
  cairo_set_line_width (cr, std::max (0.003, pixel));
  for (double x = -0.6; x <= 0.61; x += 0.1) {
    cairo_move_to (cr, x, kTableY0);
    cairo_line_to (cr, x, kTableY1);
  }
  for (double y = 0.0; y <= 0.71; y += 0.1) {
    cairo_move_to (cr, kTableX0, y);
    cairo_line_to (cr, kTableX1, y);
  }
  cairo_stroke (cr);
  const double s = w.options ().block_size;
  // The moving task: a block in motion leaves a fading trail where it was 2, 4 and 6 ticks ago
  // at its present speed (a long exposure's blur; the views from above, overhead and wrist), so
  // that one frame shows which way and how fast it goes, which a policy that sees one frame
  // needs to aim ahead of it.
  for (unsigned i = 0; i < w.blocks ().size () && w.table_turn () != 0; i++)
    for (int k = 3; k >= 1; k--) {
      const Block b = w.block_at_angle (i, w.table_angle () - 2 * k * w.table_turn ());
      cairo_save (cr);
      cairo_translate (cr, b.at.x, b.at.y);
      cairo_rotate (cr, b.yaw);
      cairo_rectangle (cr, -s / 2, -s / 2, s, s);
      const Rgb c = block_rgb (b);
      cairo_set_source_rgba (cr, c.r, c.g, c.b, 0.45 - 0.12 * k);
      cairo_fill (cr);
      cairo_restore (cr);
    }
  for (const Block &b : w.blocks ()) {
    cairo_save (cr);
    cairo_translate (cr, b.at.x, b.at.y);
    cairo_rotate (cr, b.yaw);
    cairo_rectangle (cr, -s / 2, -s / 2, s, s);
    set (cr, block_rgb (b));
    cairo_fill_preserve (cr);
    set (cr, block_rgb (b), 0.6);
    cairo_set_line_width (cr, std::max (0.004, pixel));
    cairo_stroke (cr);
    cairo_restore (cr);
  }
  const std::array<Vec2, 4> p = w.points ();
  cairo_set_line_cap (cr, CAIRO_LINE_CAP_ROUND);
  cairo_set_line_width (cr, kLinkWidth);
  set (cr, kArm);
  cairo_move_to (cr, p[0].x, p[0].y);
  for (int i = 1; i < 4; i++)
    cairo_line_to (cr, p[i].x, p[i].y);
  cairo_stroke (cr);
  set (cr, kJoint);
  for (int i = 0; i < 3; i++) {
    cairo_arc (cr, p[i].x, p[i].y, i == 0 ? 0.03 : 0.015, 0, 2 * kPi);
    cairo_fill (cr);
  }
  set (cr, kTip);
  cairo_arc (cr, p[3].x, p[3].y, 0.012, 0, 2 * kPi);
  cairo_fill_preserve (cr);
  set (cr, kJoint);
  cairo_set_line_width (cr, std::max (0.003, pixel));
  cairo_stroke (cr);
}

void
draw_overhead (cairo_t *cr, const World &w, int width, int height)
{
  set (cr, kFloor);
  cairo_paint (cr);
  const std::array<double, 6> p = overhead_projection (width, height);
  cairo_translate (cr, p[2], p[5]);
  cairo_scale (cr, p[0], p[4]);
  draw_plan (cr, w, 1.0 / p[0]);
}

void
draw_wrist (cairo_t *cr, const World &w, int width, int height)
{
  set (cr, kFloor);
  cairo_paint (cr);
  // 0.3 m across, looking down from the tool, the last link pointing up the picture; the tool
  // a little below the centre, so the camera sees more ahead of it than behind.
  const double scale = width / 0.30;
  const Vec2 t = w.tool ();
  cairo_translate (cr, width / 2.0, height * 0.62);
  cairo_scale (cr, scale, -scale);
  cairo_rotate (cr, kPi / 2 - w.tool_heading ());
  cairo_translate (cr, -t.x, -t.y);
  draw_plan (cr, w, 1.0 / scale);
}

/* A pinhole camera in front of the table. */
struct Pinhole {
  double c[3], r[3], u[3], f[3], focal, cx, cy;
  Pinhole (int width, int height)
  {
    const double eye[3] = {0.0, -0.80, 0.62}, at[3] = {0.0, 0.36, 0.0};
    double fw[3] = {at[0] - eye[0], at[1] - eye[1], at[2] - eye[2]};
    const double n = std::sqrt (fw[0] * fw[0] + fw[1] * fw[1] + fw[2] * fw[2]);
    for (int i = 0; i < 3; i++) {
      c[i] = eye[i];
      f[i] = fw[i] / n;
    }
    // r = f x z, u = r x f
    double rx = f[1], ry = -f[0];
    const double rn = std::hypot (rx, ry);
    r[0] = rx / rn, r[1] = ry / rn, r[2] = 0;
    u[0] = r[1] * f[2] - r[2] * f[1];
    u[1] = r[2] * f[0] - r[0] * f[2];
    u[2] = r[0] * f[1] - r[1] * f[0];
    focal = width / (2 * std::tan (55.0 * kPi / 360)); // 55 degrees across
    cx = width / 2.0, cy = height / 2.0;
  }
  double depth (double x, double y, double z) const
  {
    return (x - c[0]) * f[0] + (y - c[1]) * f[1] + (z - c[2]) * f[2];
  }
  void project (double x, double y, double z, double *px, double *py) const
  {
    const double d[3] = {x - c[0], y - c[1], z - c[2]};
    const double zc = d[0] * f[0] + d[1] * f[1] + d[2] * f[2];
    *px = cx + focal * (d[0] * r[0] + d[1] * r[1] + d[2] * r[2]) / zc;
    *py = cy - focal * (d[0] * u[0] + d[1] * u[1] + d[2] * u[2]) / zc;
  }
};

struct Point3 {
  double x, y, z;
};

void
polygon (cairo_t *cr, const Pinhole &cam, const Point3 *p, int n)
{
  for (int i = 0; i < n; i++) {
    double px, py;
    cam.project (p[i].x, p[i].y, p[i].z, &px, &py);
    if (i == 0)
      cairo_move_to (cr, px, py);
    else
      cairo_line_to (cr, px, py);
  }
  cairo_close_path (cr);
}

void
line3 (cairo_t *cr, const Pinhole &cam, Point3 a, Point3 b, double metres)
{
  double ax, ay, bx, by;
  cam.project (a.x, a.y, a.z, &ax, &ay);
  cam.project (b.x, b.y, b.z, &bx, &by);
  const double zc = cam.depth ((a.x + b.x) / 2, (a.y + b.y) / 2, (a.z + b.z) / 2);
  cairo_set_line_width (cr, metres * cam.focal / zc);
  cairo_move_to (cr, ax, ay);
  cairo_line_to (cr, bx, by);
  cairo_stroke (cr);
}

void
draw_front (cairo_t *cr, const World &w, int width, int height)
{
  const Pinhole cam (width, height);
  set (cr, kWall);
  cairo_paint (cr);
  const Point3 top[4] = {{kTableX0, kTableY0, 0},
                         {kTableX1, kTableY0, 0},
                         {kTableX1, kTableY1, 0},
                         {kTableX0, kTableY1, 0}};
  set (cr, kTable);
  polygon (cr, cam, top, 4);
  cairo_fill (cr);
  const Point3 front[4] = {{kTableX0, kTableY0, 0},
                           {kTableX1, kTableY0, 0},
                           {kTableX1, kTableY0, -0.04},
                           {kTableX0, kTableY0, -0.04}};
  set (cr, kTable, 0.7);
  polygon (cr, cam, front, 4);
  cairo_fill (cr);
  // The arm's shadow on the table (light from straight above): where the tool is over the
  // table, which the perspective alone would hide.
  const std::array<Vec2, 4> p = w.points ();
  cairo_set_line_cap (cr, CAIRO_LINE_CAP_ROUND);
  set (cr, kShadow);
  for (int i = 0; i < 3; i++)
    line3 (cr, cam, {p[i].x, p[i].y, 0}, {p[i + 1].x, p[i + 1].y, 0}, kLinkWidth);
  // Blocks, far to near; each one's faces that look at the camera, far to near.
  const double s = w.options ().block_size;
  std::vector<const Block *> order;
  for (const Block &b : w.blocks ())
    order.push_back (&b);
  std::sort (order.begin (), order.end (), [&] (const Block *a, const Block *b) {
    return cam.depth (a->at.x, a->at.y, s / 2) > cam.depth (b->at.x, b->at.y, s / 2);
  });
  for (const Block *b : order) {
    Point3 base[4];
    for (int k = 0; k < 4; k++) {
      const double a = b->yaw + kPi / 4 + k * kPi / 2, rr = s / std::sqrt (2.0);
      base[k] = {b->at.x + rr * std::cos (a), b->at.y + rr * std::sin (a), 0};
    }
    struct Face {
      Point3 v[4];
      double depth, shade;
    };
    std::vector<Face> faces;
    for (int k = 0; k < 4; k++) {
      const Point3 a = base[k], c = base[(k + 1) % 4];
      Face f{{a, c, {c.x, c.y, s}, {a.x, a.y, s}}, 0, 0};
      // The face's outward direction (centre to the middle of its edge), and whether it
      // looks at the camera.
      const double mx = (a.x + c.x) / 2, my = (a.y + c.y) / 2;
      const double ox = mx - b->at.x, oy = my - b->at.y;
      if (ox * (cam.c[0] - mx) + oy * (cam.c[1] - my) <= 0)
        continue;
      f.depth = cam.depth (mx, my, s / 2);
      f.shade = 0.55 + 0.25 * std::fabs (ox) / std::hypot (ox, oy);
      faces.push_back (f);
    }
    std::sort (faces.begin (), faces.end (),
               [] (const Face &a, const Face &b) { return a.depth > b.depth; });
    for (const Face &f : faces) {
      set (cr, block_rgb (*b), f.shade);
      polygon (cr, cam, f.v, 4);
      cairo_fill (cr);
    }
    Point3 lid[4];
    for (int k = 0; k < 4; k++)
      lid[k] = {base[k].x, base[k].y, s};
    set (cr, block_rgb (*b));
    polygon (cr, cam, lid, 4);
    cairo_fill (cr);
  }
  // The arm: a column at the base, the links at kArmHeight, the tool pointing down to just
  // above the table.
  const double h = kArmHeight;
  set (cr, kJoint);
  line3 (cr, cam, {0, 0, 0}, {0, 0, h}, 0.05);
  set (cr, kArm);
  for (int i = 0; i < 3; i++)
    line3 (cr, cam, {p[i].x, p[i].y, h}, {p[i + 1].x, p[i + 1].y, h}, kLinkWidth);
  set (cr, kTip);
  line3 (cr, cam, {p[3].x, p[3].y, h}, {p[3].x, p[3].y, 0.015}, 0.015);
}

/* @camera's view in a new cairo image surface; null (with *error) on failure. */
CairoSurfacePtr
draw (const World &w, Camera camera, int width, int height, std::string *error)
{
  if (width < kMinCameraSize || height < kMinCameraSize || width > kMaxCameraSize ||
      height > kMaxCameraSize) {
    *error = "camera size " + std::to_string (width) + "x" + std::to_string (height) +
             " is out of range (" + std::to_string (kMinCameraSize) + " to " +
             std::to_string (kMaxCameraSize) + ")";
    return nullptr;
  }
  CairoSurfacePtr surface (cairo_image_surface_create (CAIRO_FORMAT_RGB24, width, height));
  if (cairo_surface_status (surface.get ()) != CAIRO_STATUS_SUCCESS) {
    *error =
        std::string ("cairo: ") + cairo_status_to_string (cairo_surface_status (surface.get ()));
    return nullptr;
  }
  CairoPtr cr (cairo_create (surface.get ()));
  switch (camera) {
    case Camera::Overhead:
      draw_overhead (cr.get (), w, width, height);
      break;
    case Camera::Front:
      draw_front (cr.get (), w, width, height);
      break;
    case Camera::Wrist:
      draw_wrist (cr.get (), w, width, height);
      break;
  }
  if (cairo_status (cr.get ()) != CAIRO_STATUS_SUCCESS) {
    *error = std::string ("cairo: ") + cairo_status_to_string (cairo_status (cr.get ()));
    return nullptr;
  }
  cairo_surface_flush (surface.get ());
  return surface;
}

} // namespace

const char *
camera_name (Camera c)
{
  switch (c) {
    case Camera::Overhead:
      return "overhead";
    case Camera::Front:
      return "front";
    case Camera::Wrist:
      return "wrist";
  }
  return "?";
}

bool
camera_from_name (const std::string &name, Camera *c)
{
  for (Camera k : {Camera::Overhead, Camera::Front, Camera::Wrist})
    if (name == camera_name (k)) {
      *c = k;
      return true;
    }
  return false;
}

bool
render (const World &world, Camera camera, int width, int height, uint8_t *rgb, size_t stride,
        std::string *error)
{
  if (stride < (size_t)width * 3) {
    *error = "stride " + std::to_string (stride) + " is under 3 x width";
    return false;
  }
  CairoSurfacePtr s = draw (world, camera, width, height, error);
  if (!s)
    return false;
  const uint8_t *data = cairo_image_surface_get_data (s.get ());
  const int src_stride = cairo_image_surface_get_stride (s.get ());
  for (int y = 0; y < height; y++) {
    const uint32_t *src = reinterpret_cast<const uint32_t *> (data + (size_t)y * src_stride);
    uint8_t *dst = rgb + (size_t)y * stride;
    for (int x = 0; x < width; x++) {
      const uint32_t v = src[x]; // CAIRO_FORMAT_RGB24: 0x00RRGGBB in native order
      dst[3 * x] = (uint8_t)(v >> 16);
      dst[3 * x + 1] = (uint8_t)(v >> 8);
      dst[3 * x + 2] = (uint8_t)v;
    }
  }
  return true;
}

bool
write_png (const World &world, Camera camera, int width, int height, const std::string &path,
           std::string *error)
{
  CairoSurfacePtr s = draw (world, camera, width, height, error);
  if (!s)
    return false;
  const cairo_status_t st = cairo_surface_write_to_png (s.get (), path.c_str ());
  if (st != CAIRO_STATUS_SUCCESS) {
    *error = "cannot write " + path + ": " + cairo_status_to_string (st);
    return false;
  }
  return true;
}

std::array<double, 6>
overhead_projection (int width, int height)
{
  // x in [-0.62, 0.62], y in [-0.06, 0.70]: what the arm reaches (0.65 m) and every place a
  // block can be, scaled to fit and centred; the table's corners fall outside. A camera framed
  // on the whole table left a block a third of a 12-pixel patch at 96 pixels, too little for a
  // small vision tower to learn where it is (docs/sim.md).
  const double scale = std::min (width / 1.24, height / 0.76);
  return {scale, 0, width / 2.0, 0, -scale, height / 2.0 + 0.32 * scale};
}

} // namespace pi0::sim
