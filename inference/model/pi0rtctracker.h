/* RtcTracker: the caller's side of real-time chunking (docs/rtc.md, "In the chain"). It keeps
 * the last chunks made (in robot units) and what the sink says the robot executes, and from
 * them gives the guidance for the next chunk: which rows of the executing chunk are the prefix,
 * the delay, the execution horizon. No GStreamer and no clock: every time is nanoseconds on the
 * caller's clock (the pipeline's running time in pi0infer), passed in; kTimeNone is "no time"
 * (equal to GST_CLOCK_TIME_NONE).
 *
 * Thread-safe: feedback arrives on one thread (pi0infer: upstream events) while chunks are made
 * and guidance asked on another (the streaming thread); one mutex of its own, never held while
 * calling out.
 *
 * Errors: refused feedback is an ordinary outcome (a sink gone wrong, an old chunk), returned as
 * the reason; nothing else can fail except a caller's mistake (actions missing), which throws
 * pi0::Error as the rest of inference/. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "inference/model/pi0policy.h"

namespace pi0
{

class RtcTracker
{
public:
  static constexpr uint64_t kTimeNone = UINT64_MAX;
  /* Chunks kept for the feedback to name: the protocol's 16 (docs/protocol.md: a report names
   * one of the last 16 chunks sent), a round trip of half a second at 30 chunks a second. */
  static constexpr size_t kHistory = 16;

  /* What the sink said last (taken feedback only). */
  struct Feedback {
    uint64_t chunk_id = 0;
    uint32_t row = 0;
    uint64_t time = kTimeNone; // when that row runs
    uint64_t period = 0;       // the control period, ns
  };

  /* Forgets every chunk and all feedback (a new stream). */
  void reset ();

  /* A chunk was made and may now be executed: `horizon` rows of `dim` actions, row-major, in
   * robot units, for the observation captured at `observation_time`. Only finite chunks should be
   * given (a chunk the sink never executes can never be a prefix). The oldest beyond kHistory is
   * forgotten. Throws pi0::Error when `actions` is null for a non-empty chunk. */
  void chunk_made (uint64_t sequence, uint64_t observation_time, uint32_t horizon, uint32_t dim,
                   const float *actions);

  /* The sink says row `row` of chunk `chunk_id` runs at `time`, one row every `period` ns; `now`
   * is the caller's clock (kTimeNone: unknown, no check against it). Returns "" when taken, or
   * why it was refused (nothing changes then): a zero period, a time more than one period after
   * `now`, a chunk not among the last kHistory made, a row beyond the chunk. The first feedback
   * taken about a chunk records the row at which the sink took it over. `*forgotten` (if given)
   * says whether a refused report named a chunk made here but older than the last kHistory (a
   * report that came too late, not a wrong one). */
  std::string feedback (uint64_t chunk_id, uint32_t row, uint64_t time, uint64_t period,
                        uint64_t now, bool *forgotten = nullptr);

  /* The guidance for a new chunk whose observation was captured at `observation_time`, asked at
   * `now` (kTimeNone: unknown). The newest chunk made is the one the sink will be executing when
   * the new one arrives (it always switches to the newest); its row i runs at its observation
   * time + i periods, the new chunk's row j at `observation_time` + j periods, so the prefix is
   * its rows from s = round((observation_time - its observation time) / period) on. The delay is
   * measured: the row at which the sink took over the newest chunk it reported about (capture to
   * takeover, in rows); before any, (now - observation_time + last_inference_ms) in periods,
   * rounded up; never more than the prefix's rows. `execution_horizon` 0 means s.
   * Returns false (and leaves `out` alone) when there is nothing to guide toward: no feedback
   * yet, no chunk, no observation time, an observation older than the newest chunk's, or that
   * chunk run out by then. */
  bool guidance (uint64_t observation_time, uint64_t now, double last_inference_ms,
                 int64_t execution_horizon, double max_guidance_weight, bool identity_jacobian,
                 PolicyGuidance *out) const;

  /* The last feedback taken, if any since the last reset. */
  std::optional<Feedback> last_feedback () const;

  /* How many chunks are remembered (at most kHistory). */
  size_t chunks () const;

private:
  struct Chunk {
    uint64_t sequence = 0;
    uint64_t observation_time = kTimeNone;
    uint32_t horizon = 0, dim = 0;
    std::vector<float> actions;
    int64_t first_row = -1; // the row the sink took it over at (its first feedback); -1: none
  };

  mutable std::mutex lock_;
  std::deque<Chunk> history_; // oldest first
  uint64_t first_sequence_ = 0; // of the first chunk made since reset()
  std::optional<Feedback> feedback_;
};

} // namespace pi0
