/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "gst/infer/pi0batcher.h"

namespace pi0
{

void
BatchSchedule::reset (unsigned max_size)
{
  max_size_ = max_size > 0 ? max_size : 1;
  taken ();
}

BatchSchedule::Verdict
BatchSchedule::observation (bool infer, bool holding, uint64_t now, uint64_t max_wait)
{
  if (!infer)
    return holding ? Verdict::Hold : Verdict::PassOn;
  if (++n_infer_ >= max_size_ || max_wait == 0)
    return Verdict::Run;
  if (n_infer_ == 1) /* the first: the others are waited for, at most max_wait */
    deadline_ = now < kNever - 1 && max_wait < kNever - 1 - now ? now + max_wait : kNever - 1;
  return Verdict::Hold;
}

void
BatchSchedule::taken ()
{
  n_infer_ = 0;
  deadline_ = kNever;
}

} // namespace pi0
