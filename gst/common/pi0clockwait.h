/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A thread that waits on a GstClock for the deadline an engine gives, then lets the element act:
 * pi0infer's wait for a partial batch (pi0::Batcher's deadline) and pi0actionsink's control
 * ticks and watchdog (pi0::proto::SenderLink's). The engine decides what is due and when; this
 * only waits. Every new deadline (or none) starts a new generation, so a wait that ends for a
 * deadline that is no longer current can be told apart (current()).
 *
 * Locking: the wait's own lock is never held while @due runs, so @due may take the element's
 * locks and call follow(); follow() may be called with any of the element's locks held, stop()
 * with none that @due takes (it waits for @due to return). */

#include <gst/gst.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace pi0
{

class ClockWait
{
public:
  /* Runs on the wait's thread when the wait for @deadline (absolute clock time) ended with it
   * the one followed; @generation is the deadline's, for current(). */
  using Due = std::function<void (GstClockTime deadline, guint64 generation)>;

  ClockWait () = default;
  ClockWait (const ClockWait &) = delete;
  ClockWait &operator= (const ClockWait &) = delete;
  ~ClockWait () { stop (); }

  /* Starts the thread, named @name, which waits for what follow() gives. */
  void start (const char *name, Due due);
  /* Ends the thread (a wait in progress is unscheduled) and forgets the deadline and the clock.
   * Called from @due itself (a state change in a signal handler on that thread), it does not
   * wait for the thread: the thread ends when @due returns. */
  void stop ();
  bool running () const;

  /* The deadline to wait for from now on, in @clock's time (nullptr: the clock given before);
   * NONE: none. A wait in progress for another deadline ends without calling @due. */
  void follow (GstClockTime deadline, GstClock *clock);
  /* Whether @generation's deadline is still the one followed. */
  bool current (guint64 generation) const;

private:
  void loop (guint64 run);

  mutable std::mutex lock_;
  std::condition_variable cond_;
  bool stopping_ = false;
  GstClock *clock_ = nullptr;
  GstClockTime deadline_ = GST_CLOCK_TIME_NONE; /* as last followed; NONE: no wait */
  guint64 generation_ = 0;
  guint64 run_ = 0; /* which start() the thread belongs to: a detached one must not go on */
  GstClockID id_ = nullptr; /* the wait in progress */
  Due due_;
  std::thread thread_;
};

} // namespace pi0
