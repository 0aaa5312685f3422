/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0time.h"

/**
 * gst_pi0_element_get_running_time:
 * @element: an element in a pipeline
 *
 * The pipeline's running time now: the element's clock minus its base time. The metas'
 * stage stamps (`muxed_time`, `prepared_time`, `done_time`) are taken with this, so they
 * compare directly with buffer running times and with each other.
 *
 * Returns: the running time, or #GST_CLOCK_TIME_NONE when the element has no clock (not
 *   PAUSED or PLAYING in a pipeline) or its clock is behind its base time.
 *
 * Since: 0.2
 */
GstClockTime
gst_pi0_element_get_running_time (GstElement *element)
{
  GstClock *clock;
  GstClockTime now, base;

  g_return_val_if_fail (GST_IS_ELEMENT (element), GST_CLOCK_TIME_NONE);
  clock = gst_element_get_clock (element);
  if (!clock)
    return GST_CLOCK_TIME_NONE;
  now = gst_clock_get_time (clock);
  gst_object_unref (clock);
  base = gst_element_get_base_time (element);
  if (!GST_CLOCK_TIME_IS_VALID (now) || !GST_CLOCK_TIME_IS_VALID (base) || now < base)
    return GST_CLOCK_TIME_NONE;
  return now - base;
}
