/* Reading gst-pi0 metas from a pad probe: count observations, masked views and usable action
 * chunks. Build with `pkg-config --cflags --libs gstreamer-pi0-1.0`. */
#include <gst/gst.h>
#include <gst/pi0/pi0.h>

typedef struct {
  guint64 observations;
  guint64 masked_views;
  guint64 stale_states;
  guint64 action_chunks;
  gfloat first_action[32];
} Pi0ProbeCounts;

static GstPadProbeReturn
pi0_example_on_buffer (GstPad *pad, GstPadProbeInfo *info, gpointer user_data)
{
  Pi0ProbeCounts *counts = (Pi0ProbeCounts *)user_data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstPi0ObservationMeta *obs = gst_buffer_get_pi0_observation_meta (buf);
  GstPi0ActionMeta *act = gst_buffer_get_pi0_action_meta (buf);

  if (obs) {
    counts->observations++;
    for (guint i = 0; i < gst_pi0_observation_meta_get_n_views (obs); i++) {
      const GstPi0View *view = gst_pi0_observation_meta_get_view (obs, i);
      GstVideoFrame frame;

      if (!(view->flags & GST_PI0_VIEW_FLAG_VALID)) {
        counts->masked_views++; /* the policy ignores this camera */
        continue;
      }
      /* Pixels of one view, with its own format and strides. */
      if (gst_pi0_observation_meta_map_view (obs, buf, i, &frame, GST_MAP_READ))
        gst_video_frame_unmap (&frame);
    }
    if (obs->state_flags & GST_PI0_STATE_FLAG_STALE)
      counts->stale_states++;
  }

  /* Never act on a chunk flagged non-finite. */
  if (act && !(act->flags & GST_PI0_ACTION_FLAG_NON_FINITE)) {
    const gfloat *step0 = gst_pi0_action_meta_get_action (act, 0);
    counts->action_chunks++;
    for (guint d = 0; d < act->dim && d < G_N_ELEMENTS (counts->first_action); d++)
      counts->first_action[d] = step0[d];
  }
  return GST_PAD_PROBE_OK;
}

/* Watches every buffer that leaves @pad (e.g. pi0viewmux's or pi0infer's src pad). */
gulong pi0_example_add_probe (GstPad *pad, Pi0ProbeCounts *counts);

gulong
pi0_example_add_probe (GstPad *pad, Pi0ProbeCounts *counts)
{
  return gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, pi0_example_on_buffer, counts, NULL);
}
