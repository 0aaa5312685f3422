/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The simulated world's three cameras, drawn with cairo (docs/sim.md): a fixed camera above the
 * table looking down, a fixed camera in front of it looking over the table at an angle (with
 * perspective), and a camera on the arm's wrist looking down, which moves and turns with the
 * last link. Deterministic: the same world gives the same pixels. */
#pragma once

#include "sim/pi0simworld.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pi0::sim
{

enum class Camera { Overhead, Front, Wrist };
/* "overhead", "front", "wrist". */
const char *camera_name (Camera c);
/* Parses a name of camera_name(); false if unknown. */
bool camera_from_name (const std::string &name, Camera *c);

/* The sizes a camera may have, in pixels (each side). */
constexpr int kMinCameraSize = 16, kMaxCameraSize = 4096;

/* Draws @camera's view of @world into @rgb: packed 8-bit RGB, @stride bytes per row (at least
 * 3 * @width), @width and @height from kMinCameraSize to kMaxCameraSize. Returns false (with
 * *error) for sizes out of range or when cairo fails. */
bool render (const World &world, Camera camera, int width, int height, uint8_t *rgb, size_t stride,
             std::string *error);

/* Where the overhead camera puts a point (x, y) of the table at @width x @height: pixel
 * (p0 x + p1 y + p2, p3 x + p4 y + p5), the affine map pi0overlay's `projection` takes. */
std::array<double, 6> overhead_projection (int width, int height);

/* The same view written as a PNG file. */
bool write_png (const World &world, Camera camera, int width, int height, const std::string &path,
                std::string *error);

} // namespace pi0::sim
