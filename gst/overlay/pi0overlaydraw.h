/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What pi0overlay draws, with cairo, on a 32-bit BGRx/BGRA frame: no GStreamer here.
 *
 *  - plot: every joint's planned trajectory over the chunk's rows, in an inset at the bottom
 *    left (a quarter of the frame's height, a third of its width), each joint in its colour,
 *    scaled to its limits (a robot configuration) or, without one, to the chunk's own range;
 *  - planar: the path the tool would take, for a planar arm (joint i turns link i, the angles
 *    add up: the arm of docs/sim.md), each row's tool position mapped into the frame by an
 *    affine projection (pixel = P * (x, y, 1)): a line through the rows, the first row ringed,
 *    the last a dot. */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pi0::overlay
{

struct Chunk {
  unsigned horizon = 0, dim = 0;
  std::vector<float> actions; /* horizon x dim, row-major */
};

struct Style {
  std::vector<float> lower, upper;    /* plot: per-joint range; empty: the chunk's own */
  std::vector<double> links;          /* planar: link lengths, one per joint used */
  std::array<double, 6> projection{}; /* planar: px = p0 x + p1 y + p2, py = p3 x + p4 y + p5 */
};

/* Parses "a,b,c" (comma or space separated) into finite numbers; false with *error naming
 * @what when a value is not a finite number. */
bool parse_numbers (const std::string &text, const char *what, std::vector<double> *out,
                    std::string *error);

/* Draws @chunk on @data (@width x @height, @stride bytes per row, cairo's RGB24/ARGB32 layout:
 * BGRx/BGRA in memory on little-endian machines). Rows with a non-finite value are left out
 * of the drawing. Returns false (with *error) when cairo cannot draw. */
bool draw_plot (uint8_t *data, int width, int height, int stride, bool alpha, const Chunk &chunk,
                const Style &style, std::string *error);
bool draw_planar (uint8_t *data, int width, int height, int stride, bool alpha, const Chunk &chunk,
                  const Style &style, std::string *error);

/* The tool position of one row of a planar arm (forward kinematics), before the projection. */
void planar_tool (const std::vector<double> &links, const float *q, double *x, double *y);

} // namespace pi0::overlay
