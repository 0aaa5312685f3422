/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The simulated robot as a robot of its own across a network (`pi0-sim robot`, docs/sim.md
 * "Across a network"): its three cameras go out as RTP/JPEG (a JPEG per frame, a few datagrams:
 * a lost one costs that frame of one view; each frame carries its size, so a policy's end need
 * not be told it) and its joint state as RTP payloaded by rtpgstpay, which carries the task with
 * the state (a pi0-instruction event before every sample, a pi0-episode start event when the
 * scene is reset), to a policy's end elsewhere (pipelines/sim-policy.txt: the chain from udpsrc to
 * pi0actionsink); its action frames come back over UDP in the project's protocol
 * to its own port, and its FEEDBACK goes back to where they came from. Real time only: the
 * world ticks at the control rate on the system clock whatever the network does; the robot runs
 * the row its receiver has due at each tick, or holds. */
#pragma once

#include "tools/pi0-sim/pi0simloop.h"

#include <functional>
#include <string>

namespace pi0::tools::sim
{

struct RemoteOptions {
  std::string policy_host = "127.0.0.1"; /* where the cameras and the state go */
  int rtp_port = 5600; /* the main camera; +2 the wrist (side), +4 the front (top), +6 the state */
  std::string bind = "0.0.0.0"; /* the robot's own address for its action port */
  int port = 9870;              /* where the action frames arrive */
  /* Between episodes: the robot sends nothing and discards what comes for at least this long,
   * and until no action frame has come for a fifth of it, so that no chunk made from the last
   * episode's cameras runs in the next. */
  double gap_s = 0.5;
  /* HMAC-SHA256 key shared with pi0actionsink's `key` (empty: none): action frames must carry
   * it, and the feedback is signed with it. */
  std::string key;
  /* The world, the episodes and their seeds, the cameras' size (remote_camera_size_ok), rows
   * executed per observation, the robot configuration; timeout_s: how long to wait for the
   * policy's first answer. */
  LoopOptions loop;
};

/* A camera size RTP/JPEG carries exactly: it writes width and height in 8-pixel blocks, at most
 * 255 of them (a 100-pixel frame would arrive as 104). */
constexpr bool
remote_camera_size_ok (int pixels)
{
  return pixels > 0 && pixels % 8 == 0 && pixels <= 2040;
}

/* Waits for the policy's first answer (sending observations of the first scene, nothing
 * executed), then runs the episodes in real time, calling @on_episode after each (guided,
 * delay_rows and unanswered stay 0: the robot cannot know them; `pi0-sim robot` leaves them
 * out). False (with *error) when the
 * robot's end cannot be built, its port cannot be bound, or no policy answered within
 * timeout_s. */
bool run_remote_robot (const RemoteOptions &o,
                       const std::function<void (const EpisodeResult &)> &on_episode,
                       std::string *error);

} // namespace pi0::tools::sim
