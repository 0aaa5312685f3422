/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the tests of sim/ and of tools/pi0-sim share: the planar robot of the closed loop and a
 * camera's pixels. */
#pragma once

#include "protocol/pi0safety.h"
#include "sim/pi0simrender.h"
#include "sim/pi0simworld.h"
#include "tests/pi0testenv.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pi0test
{

/* pipelines/robot-planar.json, the simulated arm's configuration. */
inline pi0::proto::RobotConfig
planar_robot ()
{
  pi0::proto::RobotConfig r;
  std::string err;
  EXPECT_TRUE (pi0::proto::load_robot_config (source_root () + "/pipelines/robot-planar.json", &r,
                                              &err))
      << err;
  return r;
}

/* @c's view of @w as packed RGB. */
inline std::vector<uint8_t>
pixels (const pi0::sim::World &w, pi0::sim::Camera c, int width = 96, int height = 72)
{
  std::vector<uint8_t> px ((size_t)width * height * 3);
  std::string err;
  EXPECT_TRUE (pi0::sim::render (w, c, width, height, px.data (), (size_t)width * 3, &err)) << err;
  return px;
}

} // namespace pi0test
