/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gst/common/pi0clockwait: the thread that waits on the pipeline's clock for an engine's
 * deadline. On GStreamer's test clock, so time moves only when the test moves it: the due
 * callback comes once the clock reaches the deadline followed and never before, a deadline
 * replaced (or cleared) before it came is never due, and stop() works from the callback itself. */

#include "gst/common/pi0clockwait.h"
#include "tests/pi0testgst.h"

#include <gst/check/gsttestclock.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

using namespace pi0test;

namespace
{

/* What the due callback saw. */
struct Calls {
  std::mutex lock;
  std::condition_variable cond;
  std::vector<std::pair<GstClockTime, guint64>> due;

  void add (GstClockTime deadline, guint64 generation)
  {
    std::lock_guard<std::mutex> lk (lock);
    due.emplace_back (deadline, generation);
    cond.notify_all ();
  }
  /* Waits (in real time, a bound only so that a hang fails) for @n calls. */
  bool wait_for (size_t n)
  {
    std::unique_lock<std::mutex> lk (lock);
    return cond.wait_for (lk, std::chrono::seconds (10), [&] { return due.size () >= n; });
  }
  size_t count ()
  {
    std::lock_guard<std::mutex> lk (lock);
    return due.size ();
  }
};

/* Waits (a real-time bound only so that a hang fails) until the ClockWait's thread waits on
 * @clock for @deadline alone: a wait it unscheduled may still be listed for a moment. */
void
wait_for_wait (GstTestClock *clock, GstClockTime deadline)
{
  for (int i = 0; i < 10000; i++) {
    GstClockID id = nullptr;
    if (gst_test_clock_peek_id_count (clock) == 1 &&
        gst_test_clock_peek_next_pending_id (clock, &id)) {
      const GstClockTime t = gst_clock_id_get_time (id);
      gst_clock_id_unref (id);
      if (t == deadline)
        return;
    }
    g_usleep (1000);
  }
  ADD_FAILURE () << "no wait for " << deadline << " ns";
}

} // namespace

TEST (ClockWait, DueOnceTheClockReachesTheDeadlineAndNotBefore)
{
  ObjectPtr<GstTestClock> clock (GST_TEST_CLOCK (gst_test_clock_new_with_start_time (0)));
  Calls calls;
  pi0::ClockWait w;
  EXPECT_FALSE (w.running ());
  w.start ("pi0-test-wait", [&] (GstClockTime d, guint64 g) { calls.add (d, g); });
  EXPECT_TRUE (w.running ());

  w.follow (100 * GST_MSECOND, GST_CLOCK (clock.get ()));
  wait_for_wait (clock.get (), 100 * GST_MSECOND);
  gst_test_clock_set_time (clock.get (), 99 * GST_MSECOND);
  EXPECT_EQ (calls.count (), 0u) << "not before its deadline";
  /* The test clock releases a wait only at or after its time. */
  EXPECT_EQ (gst_test_clock_process_next_clock_id (clock.get ()), nullptr) << "not due yet";
  EXPECT_EQ (calls.count (), 0u) << "not before its deadline";
  gst_test_clock_set_time (clock.get (), 100 * GST_MSECOND);
  GstClockID id = gst_test_clock_process_next_clock_id (clock.get ());
  ASSERT_NE (id, nullptr);
  gst_clock_id_unref (id);
  ASSERT_TRUE (calls.wait_for (1));
  EXPECT_EQ (calls.due[0].first, 100 * GST_MSECOND);
  EXPECT_TRUE (w.current (calls.due[0].second)) << "the deadline is still the one followed";
  w.stop ();
  EXPECT_FALSE (w.running ());
  EXPECT_FALSE (w.current (calls.due[0].second)) << "nothing is current once stopped";
  EXPECT_EQ (calls.count (), 1u) << "due once";
}

/* A deadline replaced before it came is never due (nor is one cleared with NONE): the wait for it
 * is unscheduled, its generation is no longer current, and the new one is waited for. */
TEST (ClockWait, AReplacedOrClearedDeadlineIsNeverDue)
{
  ObjectPtr<GstTestClock> clock (GST_TEST_CLOCK (gst_test_clock_new_with_start_time (0)));
  Calls calls;
  pi0::ClockWait w;
  w.start ("pi0-test-wait", [&] (GstClockTime d, guint64 g) { calls.add (d, g); });

  w.follow (100 * GST_MSECOND, GST_CLOCK (clock.get ()));
  wait_for_wait (clock.get (), 100 * GST_MSECOND);
  w.follow (300 * GST_MSECOND, nullptr); /* the clock given before */
  wait_for_wait (clock.get (), 300 * GST_MSECOND);
  gst_test_clock_set_time (clock.get (), 200 * GST_MSECOND);
  EXPECT_EQ (gst_test_clock_process_next_clock_id (clock.get ()), nullptr)
      << "the 100 ms wait is gone, the 300 ms one not due";
  EXPECT_EQ (calls.count (), 0u);

  w.follow (GST_CLOCK_TIME_NONE, nullptr);
  /* Cleared: the thread waits for a deadline, not on the clock. */
  for (int i = 0; i < 100 && gst_test_clock_peek_id_count (clock.get ()) > 0; i++)
    g_usleep (1000);
  EXPECT_EQ (gst_test_clock_peek_id_count (clock.get ()), 0u);
  gst_test_clock_set_time (clock.get (), 400 * GST_MSECOND);
  EXPECT_EQ (calls.count (), 0u);

  /* A new deadline already past is due at once. */
  w.follow (350 * GST_MSECOND, nullptr);
  wait_for_wait (clock.get (), 350 * GST_MSECOND);
  GstClockID id = gst_test_clock_process_next_clock_id (clock.get ());
  ASSERT_NE (id, nullptr);
  gst_clock_id_unref (id);
  ASSERT_TRUE (calls.wait_for (1));
  EXPECT_EQ (calls.due[0].first, 350 * GST_MSECOND);
  w.stop ();
  EXPECT_EQ (calls.count (), 1u);
}

/* stop() from the due callback (a state change from a signal handler on the wait's thread)
 * returns without waiting for itself, and the thread ends after the callback; start() again
 * works. */
TEST (ClockWait, StopFromTheCallbackDoesNotDeadlockAndStartWorksAgain)
{
  ObjectPtr<GstTestClock> clock (GST_TEST_CLOCK (gst_test_clock_new_with_start_time (0)));
  Calls calls;
  pi0::ClockWait w;
  w.start ("pi0-test-wait", [&] (GstClockTime d, guint64 g) {
    w.stop ();
    calls.add (d, g);
  });
  w.follow (10 * GST_MSECOND, GST_CLOCK (clock.get ()));
  gst_test_clock_crank (clock.get ());
  ASSERT_TRUE (calls.wait_for (1));
  EXPECT_FALSE (w.running ());

  w.start ("pi0-test-wait", [&] (GstClockTime d, guint64 g) { calls.add (d, g); });
  EXPECT_TRUE (w.running ());
  w.follow (20 * GST_MSECOND, GST_CLOCK (clock.get ()));
  gst_test_clock_crank (clock.get ());
  ASSERT_TRUE (calls.wait_for (2));
  EXPECT_EQ (calls.due[1].first, 20 * GST_MSECOND);
  w.stop ();
}
