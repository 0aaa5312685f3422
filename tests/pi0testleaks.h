/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Leak checks through GStreamer's leaks tracer (the test runs with GST_TRACERS=leaks), and the
 * state cycles the soak tests run under it. Its
 * activity checkpoints list types and addresses only and take no references, so they are
 * safe mid-run, unlike get-live-objects. */

#include <gst/gst.h>
#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace pi0test
{

/* The active leaks tracer (a new reference), or nullptr. */
inline GstTracer *
leaks_tracer ()
{
  GstTracer *found = nullptr;
  GList *tracers = gst_tracing_get_active_tracers ();
  for (GList *l = tracers; l; l = l->next) {
    if (!found && g_str_equal (G_OBJECT_TYPE_NAME (l->data), "GstLeaksTracer"))
      found = (GstTracer *)gst_object_ref (l->data);
  }
  g_list_free_full (tracers, gst_object_unref);
  return found;
}

/* Objects created since "activity-start-tracking" (or the last checkpoint) and not destroyed
 * since, by type name. */
inline std::map<std::string, int>
alive_since_start (GstTracer *tracer)
{
  std::map<std::pair<std::string, std::string>, int> balance;
  std::map<std::string, int> out;
  GstStructure *cp = nullptr;
  g_signal_emit_by_name (tracer, "activity-get-checkpoint", &cp);
  if (!cp)
    return out;
  for (auto [field, delta] :
       {std::make_pair ("objects-created-list", 1), std::make_pair ("objects-removed-list", -1)}) {
    const GValue *list = gst_structure_get_value (cp, field);
    for (guint i = 0; list && i < gst_value_list_get_size (list); i++) {
      const GstStructure *o = gst_value_get_structure (gst_value_list_get_value (list, i));
      balance[{gst_structure_get_string (o, "type-name"),
               gst_structure_get_string (o, "address")}] += delta;
    }
  }
  gst_structure_free (cp);
  for (const auto &kv : balance) {
    if (kv.second > 0)
      out[kv.first.first] += kv.second;
  }
  return out;
}

/* Soak tests: buffers with an observation (or action) meta counted at a fakesink's handoff,
 * PLAYING<->NULL cycles that wait for them. */
struct Counter {
  std::mutex lock;
  std::condition_variable cond;
  int n = 0;
  bool count_actions = false; /* count buffers with an action meta instead of observations */
};

inline void
on_handoff (GstElement *, GstBuffer *buf, GstPad *, gpointer user_data)
{
  auto c = static_cast<Counter *> (user_data);
  bool has_meta = c->count_actions ? gst_buffer_get_pi0_action_meta (buf) != nullptr
                                   : gst_buffer_get_pi0_observation_meta (buf) != nullptr;
  std::lock_guard<std::mutex> lk (c->lock);
  if (has_meta)
    c->n++;
  c->cond.notify_all ();
}

inline void
run_cycles (GstElement *pipe, Counter &c, int cycles, int buffers_per_cycle)
{
  for (int i = 0; i < cycles; i++) {
    {
      std::lock_guard<std::mutex> lk (c.lock);
      c.n = 0;
    }
    ASSERT_NE (gst_element_set_state (pipe, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    {
      std::unique_lock<std::mutex> lk (c.lock);
      /* A generous bound only so that a hang fails instead of blocking CI. */
      bool got =
          c.cond.wait_for (lk, std::chrono::seconds (20), [&] { return c.n >= buffers_per_cycle; });
      ASSERT_TRUE (got) << "cycle " << i << ": only " << c.n << " observations";
    }
    ASSERT_EQ (gst_element_set_state (pipe, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  }
}

/* Two warm-up cycles (they load plugins and fill caches that live for the whole process), then
 * @cycles PLAYING<->NULL cycles tracked by the leaks tracer: every object created during them
 * must be gone at the end. */
inline void
expect_cycles_leak_nothing (GstTracer *tracer, GstElement *pipe, Counter &c, int cycles,
                            int per_cycle)
{
  run_cycles (pipe, c, 2, per_cycle);
  g_signal_emit_by_name (tracer, "activity-start-tracking");
  run_cycles (pipe, c, cycles, per_cycle);
  /* A stopped task's thread drops its last reference to the GstTask a moment after the join:
   * wait for the task threads, as GStreamer's own leak tests do. */
  gst_task_cleanup_all ();
  auto leaked = alive_since_start (tracer);
  g_signal_emit_by_name (tracer, "activity-stop-tracking");
  for (const auto &kv : leaked)
    ADD_FAILURE () << kv.second << " " << kv.first << " created during the cycles still alive";
  EXPECT_TRUE (leaked.empty ());
}

} // namespace pi0test
