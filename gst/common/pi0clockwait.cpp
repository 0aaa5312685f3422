/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/common/pi0clockwait.h"

#include <pthread.h>

#include <string>

namespace pi0
{

void
ClockWait::start (const char *name, Due due)
{
  stop ();
  guint64 run;
  {
    std::lock_guard<std::mutex> lk (lock_);
    stopping_ = false;
    deadline_ = GST_CLOCK_TIME_NONE;
    run = ++run_;
    due_ = std::move (due);
  }
  thread_ = std::thread (&ClockWait::loop, this, run);
  /* Linux names are 15 bytes at most. */
  pthread_setname_np (thread_.native_handle (), std::string (name).substr (0, 15).c_str ());
}

void
ClockWait::stop ()
{
  {
    std::lock_guard<std::mutex> lk (lock_);
    stopping_ = true;
    deadline_ = GST_CLOCK_TIME_NONE;
    generation_++;
    if (id_)
      gst_clock_id_unschedule (id_);
  }
  cond_.notify_all ();
  if (thread_.joinable ()) {
    if (thread_.get_id () == std::this_thread::get_id ())
      thread_.detach (); /* from @due: the loop sees stopping_ once @due returns */
    else
      thread_.join ();
  }
  std::lock_guard<std::mutex> lk (lock_);
  gst_clear_object (&clock_);
}

bool
ClockWait::running () const
{
  std::lock_guard<std::mutex> lk (lock_);
  return thread_.joinable () && !stopping_;
}

void
ClockWait::follow (GstClockTime deadline, GstClock *clock)
{
  std::lock_guard<std::mutex> lk (lock_);
  if (clock)
    gst_object_replace ((GstObject **)&clock_, GST_OBJECT (clock));
  if (deadline == deadline_)
    return;
  deadline_ = deadline;
  generation_++;
  if (id_)
    gst_clock_id_unschedule (id_);
  cond_.notify_all ();
}

bool
ClockWait::current (guint64 generation) const
{
  std::lock_guard<std::mutex> lk (lock_);
  return !stopping_ && generation_ == generation;
}

void
ClockWait::loop (guint64 run)
{
  std::unique_lock<std::mutex> lk (lock_);
  while (!stopping_ && run_ == run) {
    if (!GST_CLOCK_TIME_IS_VALID (deadline_) || !clock_) {
      cond_.wait (lk);
      continue;
    }
    const guint64 generation = generation_;
    const GstClockTime deadline = deadline_;
    GstClockID id = gst_clock_new_single_shot_id (clock_, deadline);
    id_ = id;
    lk.unlock ();
    gst_clock_id_wait (id, nullptr);
    lk.lock ();
    id_ = nullptr;
    gst_clock_id_unref (id);
    if (stopping_ || run_ != run || generation_ != generation)
      continue;
    Due due = due_;
    lk.unlock ();
    due (deadline, generation);
    lk.lock ();
  }
}

} // namespace pi0
