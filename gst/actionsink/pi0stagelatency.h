/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The latency of each stage of the chain, from the running-time stamps the elements leave in
 * the metas (pi0viewmux's muxed_time, cudaprep's prepared_time, pi0infer's done_time) and the
 * time a chunk is sent: pi0actionsink's stats. */

#include "gst/common/pi0percentile.h"

#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

namespace pi0
{

/* The stages, in order, and what each measures: the names of the `stats` fields
 * (STAGE-p50/-p99/-max) and the rows of the tables pi0-demo and bench/e2e print. */
struct Stage {
  const char *name;
  const char *what;
};
constexpr Stage kStages[] = {
    {"mux", "capture -> observation (mux wait)"}, {"prep", "preprocessing (cudaprep)"},
    {"infer", "queue + inference (pi0infer)"},    {"sink", "sink (checks, send)"},
    {"end-to-end", "capture -> sent (end to end)"},
};

/* Running times at which one chunk's observation passed each stage. */
struct StageStamps {
  GstClockTime capture = GST_CLOCK_TIME_NONE;  /* observation_time: the base frame */
  GstClockTime muxed = GST_CLOCK_TIME_NONE;    /* GstPi0ObservationMeta.muxed_time */
  GstClockTime prepared = GST_CLOCK_TIME_NONE; /* GstPi0TensorMeta.prepared_time */
  GstClockTime done = GST_CLOCK_TIME_NONE;     /* GstPi0ActionMeta.done_time */
};

inline StageStamps
stage_stamps (GstBuffer *buf, const GstPi0ActionMeta *meta)
{
  StageStamps t;
  t.capture = meta->observation_time;
  t.done = meta->done_time;
  if (GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (buf))
    t.muxed = om->muxed_time;
  if (GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (buf))
    t.prepared = tm->prepared_time;
  return t;
}

/* Per-stage latencies of the last kWindow chunks sent. */
class StageLatency
{
public:
  static constexpr size_t kWindow = 1024;

  void add (const StageStamps &t, GstClockTime sent)
  {
    const GstClockTime points[kN + 1] = {t.capture, t.muxed, t.prepared, t.done, sent};
    for (int s = 0; s < kEndToEnd; s++)
      push (s, points[s], points[s + 1]);
    push (kEndToEnd, t.capture, sent);
    chunks_++;
  }

  /* `latency-chunks` and, for each stage with samples, STAGE-p50/-p99/-max in ns. */
  void write (GstStructure *st) const
  {
    gst_structure_set (st, "latency-chunks", G_TYPE_UINT64, chunks_, nullptr);
    for (int i = 0; i < kN; i++) {
      if (samples_[i].empty ())
        continue;
      std::vector<GstClockTime> v (samples_[i].begin (), samples_[i].end ());
      const std::string n = kStages[i].name;
      const GstClockTime max = *std::max_element (v.begin (), v.end ());
      gst_structure_set (st, (n + "-p50").c_str (), G_TYPE_UINT64, percentile (v, 0.50),
                         (n + "-p99").c_str (), G_TYPE_UINT64, percentile (v, 0.99),
                         (n + "-max").c_str (), G_TYPE_UINT64, max, nullptr);
    }
  }

private:
  enum { kEndToEnd = 4, kN = 5 };
  static_assert (sizeof (kStages) / sizeof (kStages[0]) == kN, "one name per stage");
  void push (int s, GstClockTime a, GstClockTime b)
  {
    if (!GST_CLOCK_TIME_IS_VALID (a) || !GST_CLOCK_TIME_IS_VALID (b) || b < a)
      return;
    samples_[s].push_back (b - a);
    if (samples_[s].size () > kWindow)
      samples_[s].pop_front ();
  }
  std::deque<GstClockTime> samples_[kN];
  guint64 chunks_ = 0; /* chunks measured since start */
};

} // namespace pi0
