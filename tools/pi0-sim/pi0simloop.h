/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The closed loop, lock-step (docs/sim.md): the simulated world's cameras and joint state go
 * into the chain (appsrc ! pi0viewmux ! cudaprep ! pi0infer ! pi0actionsink), the chunks come
 * back over UDP in the project's protocol and are executed by the robot's receiver
 * (pi0::proto::Receiver, with FEEDBACK), and the world advances only when the chunk for its
 * observation has arrived. The pipeline runs on a clock this program advances (one control
 * period per executed row), so nothing depends on how fast the machine is: the same seed and
 * policy give the same episodes. LoopOptions::real_time runs it on the clock instead. */
#pragma once

#include "sim/pi0simworld.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pi0::tools::sim
{

/* The world is the GStreamer-free sim/ library's (pi0::sim); what runs it through the chain is
 * the tool's. */
using pi0::sim::Outcome;
using pi0::sim::SceneOptions;

struct LoopOptions {
  /* "expert": the scripted expert's chunks, attached to each observation in place of
   * pi0infer (for recording demonstrations); otherwise pi0infer's `model` (a checkpoint
   * directory, builtin:pi0-tiny, ...). */
  std::string policy = "expert";
  std::string infer_properties; /* more pi0infer properties, "rtc=off num-steps=10" */
  std::string robot_config;     /* the arm: pipelines/robot-planar.json */
  uint64_t seed = 0;            /* episode e is scene seed + e */
  unsigned episodes = 1;
  unsigned execute = 5;  /* rows of each chunk executed before the next observation */
  unsigned horizon = 10; /* the expert's chunk length */
  int camera_width = 224, camera_height = 224;
  int prep_size = 224;   /* cudaprep's width and height: the model's image size */
  std::string record;    /* a LeRobotDataset directory to append each episode to, or "" */
  bool lossless = false; /* record the cameras bit-exact (pi0lerobotsink lossless=true) */
  /* A directory: the main camera with pi0overlay's drawing of the chunk being run, one PNG per
   * observation (SEED-TICK.png), or "". */
  std::string overlay;
  double timeout_s = 120; /* real seconds the loop waits for one chunk before it gives up */
  /* World time from an observation's capture to its chunk reaching the robot, ns: the chunk
   * waits at the sink's pad while the robot runs on what it has (the paper's inference delay,
   * wherever it is spent). Below execute periods. */
  uint64_t delay_ns = 0;
  /* Real time instead of lock-step: the world ticks on the pipeline's (system) clock at the
   * control rate whether or not a chunk has come, the cameras are live sources captured every
   * `execute` ticks, and the robot runs what has arrived by each tick (or holds), as a real one
   * would. For demos and benches: how fast the machine is changes the episodes. */
  bool real_time = false;
  /* The synchronous baseline (lock-step): the robot waits for each chunk but an episode's
   * first, holding still for the delay (rounded up to whole ticks) while the world goes on,
   * then runs it from its first row. No delay limit: nothing runs while it waits. */
  bool sync = false;
  SceneOptions scene;
};

/* One control tick as the robot ran it: the row its receiver had under way (chunk and step index;
 * 0 and 0 before any) and the joint command the arm was given, empty when it held. */
struct TickRow {
  uint64_t chunk = 0;
  uint32_t row = 0;
  std::vector<float> command;
};

struct EpisodeResult {
  uint64_t seed = 0;
  std::string instruction;
  Outcome outcome = Outcome::Running;
  unsigned ticks = 0;      /* when the outcome was decided */
  unsigned chunks = 0;     /* action chunks received */
  unsigned unanswered = 0; /* observations the policy gave no chunk it may send for (skipped,
                            * or not finite: the sink sends none of it); the robot went on
                            * with the rows it had, or held */
  unsigned rejected = 0;   /* frames the robot's receiver refused */
  unsigned executed = 0;   /* rows the receiver scheduled */
  unsigned guided = 0;     /* chunks pi0infer sampled with real-time chunking's guidance */
  unsigned delay_rows = 0; /* the delay it measured for the last of them, in rows */
  /* What the arm did, from its joint positions at each tick (ticks that held count too): */
  double jerk = 0;       /* mean |third difference| / period^3 over ticks and joints, rad/s^3 */
  unsigned switches = 0; /* ticks whose row came from a newer chunk than the tick before's */
  double switch_step_max = 0; /* the largest joint step at those ticks, rad */
  double switch_step_sum = 0; /* their sum (for the mean over episodes) */
  double step_max = 0;        /* the largest joint step at the other ticks, rad */
  unsigned late = 0; /* real time: ticks run a period or more after their time (the loop slow) */
  std::vector<TickRow> tick_rows; /* every tick of the episode, in order (pi0-sim --rows) */
};

/* Whether @o is a run at all, before anything is built: execute within the expert's horizon,
 * --record with execute 1 and lock-step, a delay in lock-step and shorter than execute periods,
 * a whole control rate. False with why (pi0-sim's bad arguments: exit status 2). */
bool check_options (const LoopOptions &o, std::string *error);

/* Runs the episodes, calling @on_episode after each. False (with *error) when @o does not pass
 * check_options(), the chain cannot be built or run, or a chunk does not come within
 * timeout_s. */
bool run_loop (const LoopOptions &o, const std::function<void (const EpisodeResult &)> &on_episode,
               std::string *error);

} // namespace pi0::tools::sim
