/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* pi0infer's engine (docs/design.md, "Engines"), as DeepStream's DsNvInferImpl: what the element
 * does with the policy, apart from GObject. It opens the policy (pi0::open_policy() with the
 * element's settings, and its warm-up run), reads an observation buffer (cudaprep's
 * GstPi0TensorMeta, the GstPi0ObservationMeta's robot state, and a server's GstPi0RequestMeta:
 * the client's prompt and seed), checks it against the policy, builds the request (images
 * without a copy, state, instruction, seed, real-time chunking guidance from pi0::RtcTracker),
 * runs the policy on one request or a batch, writes the chunk as a GstPi0ActionMeta, takes
 * pi0actionsink's feedback, and keeps the stats. It includes no element header, reads no clock
 * and posts nothing: each call takes the settings snapshot and the running time, and returns
 * its errors and warnings, worded here, in a pi0::Notices that the element posts. The element
 * (gstpi0infer.cpp) is the glue: properties, caps, events, queries, the batching clock wait
 * (pi0batchwait.h; pi0::Batcher decides), the done_time stamp and pushing.
 *
 * Threads: open, prepare, infer and close belong to whoever holds the element's sink stream lock
 * (the streaming thread, or the batching wait thread); the stats and the model id are read from
 * any thread (stats_lock, never held while posting or running the policy); feedback comes on
 * upstream event threads (the tracker locks itself). */

#include "gst/common/pi0notice.h"
#include "gst/infer/gstpi0inferenums.h"

#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include "inference/model/pi0openpolicy.h"
#include "inference/model/pi0rtctracker.h"

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pi0::infer
{

/* The element's properties, each starting at its default: the element's param specs read them
 * here. model, tokenizer and norm_stats are NULL when empty. */
struct Settings {
  std::string model;
  std::string tokenizer;
  std::string instruction; /* "" */
  std::string norm_stats;
  GstPi0InferNormMode norm_mode = GST_PI0_INFER_NORM_MODE_ZSCORE;
  int action_dims = 0;
  int num_steps = 10;
  GstPi0InferPrecision precision = GST_PI0_INFER_PRECISION_AUTO;
  GstPi0Device device = GST_PI0_DEVICE_AUTO;
  int cuda_device_id = -1; /* -1: auto, device 0 (where cudaprep's auto puts the tensor) */
  guint64 seed = 0;
  bool require_state = true;
  GstPi0InferRtc rtc = GST_PI0_INFER_RTC_OFF;
  guint rtc_execution_horizon = 0; /* 0: the rows already due when the observation was taken */
  double rtc_max_guidance_weight = 5.0;
  guint max_batch_size = 1;
  guint64 max_batch_wait = 5 * GST_MSECOND;
  std::string transforms = "none"; /* openpi's robot transforms (model/pi0transforms.h) */
  /* For a pi0.5 checkpoint that names neither its type nor this (openpi's converter's). */
  GstPi0InferDiscreteState discrete_state_input = GST_PI0_INFER_DISCRETE_STATE_AUTO;
};

/* The inference times the stats keep (p50/p99 over these). */
constexpr size_t kLatencyWindow = 200;

/* One observation ready to run (infer), or to pass on without actions; while batching, also an
 * instruction event held so that it stays between the same buffers downstream. */
struct Prepared {
  GstBuffer *buf = nullptr;  /* while batching: the buffer (owned) */
  GstEvent *event = nullptr; /* while batching: an event held in its place (owned) */
  bool infer = false;        /* false: passes on without actions (no state) */
  pi0::Request rq;
  bool guided = false;
  guint64 sequence = 0;
  GstClockTime observation_time = GST_CLOCK_TIME_NONE;
  std::string instruction;
};

class Runner
{
public:
  /* @log: the element, for the debug log only. */
  explicit Runner (GstObject *log) : log_ (log) {}
  Runner (const Runner &) = delete;
  Runner &operator= (const Runner &) = delete;

  /* Opens the policy @s names and runs one blank observation through it (a broken policy fails
   * here, and the first real observation is not slow); resets the stats and the real-time
   * chunking tracker. false with the error (what to set, the file, the library) in @n. */
  bool open (const Settings &s, Notices &n);
  /* Lets the policy go (the stats and the model id stay readable). */
  void close ();
  const pi0::OpenedPolicy *policy () const { return policy_.get (); }

  /* Everything before the policy runs on @buf at running time @now: the checks, the state rule,
   * the request (the prompt and seed of @buf's GstPi0RequestMeta when it has one, else the
   * instruction and seed + sequence). OK with @p->infer false: the buffer passes on without
   * actions; any other return has its error in @n. */
  GstFlowReturn prepare (GstBuffer *buf, const Settings &s, GstClockTime now, Prepared *p,
                         Notices &n);
  /* The policy on @p alone, its chunk onto @buf (done_time is the element's to stamp). A
   * guidance prefix the model refuses falls back to an unguided chunk with a warning. false
   * with the error in @n. */
  bool infer_one (GstBuffer *buf, Prepared &p, Notices &n);
  /* The policy on @todo (each with its buffer) in one forward pass, each chunk onto its buffer.
   * false when the stacked pass failed (nothing attached, no error): run them alone. */
  bool infer_together (const std::vector<Prepared *> &todo, Notices &n);

  /* A served request failed alone (the element keeps the stream going): counted; returns how
   * many so far. */
  guint64 count_failed_request ();

  /* A pi0-executing event from the sink at running time @now: taken, or refused with a
   * rate-limited warning. */
  void feedback (GstEvent *event, GstClockTime now, Notices &n);
  /* An episode starts (a pi0-episode start event): the chunks made before and what the robot
   * said about them guide nothing after (the robot may have been reset). */
  void new_episode () { rtc_.reset (); }

  /* The `stats` property, and the id of the policy opened last (empty before). */
  GstStructure *stats () const;
  std::string model_id () const;
  /* The processing time to report as latency: the p99 of recent inferences, or the warm-up
   * before any. */
  GstClockTime processing_time () const;

private:
  struct Stats {
    guint64 observations = 0; /* buffers seen */
    guint64 chunks = 0;       /* action metas attached */
    guint64 skipped_state = 0;
    guint64 non_finite = 0;
    guint64 errors = 0;
    std::string last_error;
    std::deque<double> latencies_ms; /* the last kLatencyWindow inferences */
    double total_ms = 0;             /* all inferences since start: busy time */
    double warmup_ms = 0;
    guint64 rtc_guided = 0;           /* chunks sampled with guidance */
    guint64 rtc_feedback = 0;         /* pi0-executing events taken */
    guint64 rtc_feedback_ignored = 0; /* pi0-executing events refused (a warning says why) */
    guint64 rtc_feedback_forgotten = 0; /* of those: about a chunk older than the last 16 made */
    guint64 rtc_delay = 0;            /* delay in rows of the last guided chunk */
    guint64 rtc_prefix_rows = 0;      /* rows of the executing chunk it was guided toward */
    guint64 passes = 0;               /* policy calls: one per observation, or per batch */
    guint64 failed_requests = 0;      /* served requests that failed alone: their client told */
  };

  Stats snapshot () const;
  void record_error (const std::string &what);
  void count_pass ();
  void ignore_feedback (const std::string &why, Notices &n);
  void attach (GstBuffer *buf, Prepared &p, const pi0::Response &response, double ms,
               double busy_ms, Notices &n);

  GstObject *log_; /* not owned: the element, for the debug log only */
  std::unique_ptr<pi0::OpenedPolicy> policy_;
  pi0::RtcTracker rtc_;
  bool warned_no_state_ = false, warned_truncated_ = false, warned_rtc_unsupported_ = false;
  bool warned_state_ignored_ = false;  /* a state on a model that reads none (said once) */
  bool warned_device_ = false;         /* the tensor on another CUDA device (said once) */
  guint warned_execution_horizon_ = 0; /* the value last warned about (0: none) */

  mutable std::mutex stats_lock_;
  Stats stats_;
  std::string model_id_; /* under stats_lock_ */
};

} // namespace pi0::infer
