/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/pi0/gstpi0actionmeta.h"
#include "gst/pi0/gstpi0meta-private.h"

#include <math.h>
#include <string.h>

GST_DEBUG_CATEGORY_EXTERN (gst_pi0_meta_debug);
#define GST_CAT_DEFAULT gst_pi0_meta_debug

GType
gst_pi0_action_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = {NULL};

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstPi0ActionMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
gst_pi0_action_meta_init (GstMeta *meta, gpointer params, GstBuffer *buffer)
{
  GstPi0ActionMeta *m = (GstPi0ActionMeta *)meta;

  m->version = GST_PI0_META_VERSION;
  m->sequence = 0;
  m->observation_time = GST_CLOCK_TIME_NONE;
  m->inference_time = GST_CLOCK_TIME_NONE;
  m->horizon = 0;
  m->dim = 0;
  m->actions = NULL;
  m->model_id = NULL;
  m->flags = GST_PI0_ACTION_FLAG_NONE;
  m->done_time = GST_CLOCK_TIME_NONE;
  return TRUE;
}

static void
gst_pi0_action_meta_free (GstMeta *meta, GstBuffer *buffer)
{
  GstPi0ActionMeta *m = (GstPi0ActionMeta *)meta;

  g_clear_pointer (&m->actions, g_free);
  g_clear_pointer (&m->model_id, g_free);
}

static gboolean
gst_pi0_action_meta_transform (GstBuffer *dest, GstMeta *meta, GstBuffer *buffer, GQuark type,
                               gpointer data)
{
  GstPi0ActionMeta *src = (GstPi0ActionMeta *)meta;
  GstPi0ActionMeta *dst;

  if (!GST_META_TRANSFORM_IS_COPY (type))
    return FALSE;
  dst = gst_buffer_add_pi0_action_meta (dest, src->horizon, src->dim, src->actions, src->model_id);
  if (!dst)
    return FALSE;
  dst->version = src->version;
  dst->sequence = src->sequence;
  dst->observation_time = src->observation_time;
  dst->inference_time = src->inference_time;
  dst->flags = src->flags;
  dst->done_time = src->done_time;
  return TRUE;
}

const GstMetaInfo *
gst_pi0_action_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **)&info)) {
    gst_pi0_meta_debug_ensure ();
    const GstMetaInfo *mi = gst_meta_register (
        GST_PI0_ACTION_META_API_TYPE, "GstPi0ActionMeta", sizeof (GstPi0ActionMeta),
        gst_pi0_action_meta_init, gst_pi0_action_meta_free, gst_pi0_action_meta_transform);
    g_once_init_leave ((GstMetaInfo **)&info, (GstMetaInfo *)mi);
  }
  return info;
}

/**
 * gst_buffer_add_pi0_action_meta:
 * @buffer: a writable buffer
 * @horizon: rows
 * @dim: columns
 * @actions: (array) (nullable): @horizon × @dim values to copy, or %NULL for zeros
 * @model_id: (nullable): the policy's identifier
 *
 * Returns: (transfer none) (nullable): the meta, its flags computed from the values.
 */
GstPi0ActionMeta *
gst_buffer_add_pi0_action_meta (GstBuffer *buffer, guint horizon, guint dim, const gfloat *actions,
                                const gchar *model_id)
{
  GstPi0ActionMeta *m;
  gsize n = (gsize)horizon * dim;

  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  g_return_val_if_fail (horizon > 0 && dim > 0, NULL);

  m = (GstPi0ActionMeta *)gst_buffer_add_meta (buffer, GST_PI0_ACTION_META_INFO, NULL);
  if (!m)
    return NULL;
  m->horizon = horizon;
  m->dim = dim;
  m->actions = actions ? (gfloat *)g_memdup2 (actions, n * sizeof (gfloat)) : g_new0 (gfloat, n);
  m->model_id = g_strdup (model_id ? model_id : "");
  gst_pi0_action_meta_check_finite (m);
  return m;
}

/**
 * gst_pi0_action_meta_get_action:
 *
 * Returns: (transfer none) (array) (nullable): the @dim values of step @step, or %NULL.
 */
const gfloat *
gst_pi0_action_meta_get_action (const GstPi0ActionMeta *meta, guint step)
{
  g_return_val_if_fail (meta != NULL, NULL);
  if (step >= meta->horizon || !meta->actions)
    return NULL;
  return meta->actions + (gsize)step * meta->dim;
}

/**
 * gst_pi0_action_meta_check_finite:
 *
 * Scans every value and sets or clears %GST_PI0_ACTION_FLAG_NON_FINITE. Call it after writing
 * @actions directly.
 *
 * Returns: %TRUE when every value is finite.
 */
gboolean
gst_pi0_action_meta_check_finite (GstPi0ActionMeta *meta)
{
  gsize n;
  gboolean finite = TRUE;

  g_return_val_if_fail (meta != NULL, FALSE);
  n = (gsize)meta->horizon * meta->dim;
  for (gsize i = 0; i < n; i++) {
    if (!isfinite (meta->actions[i])) {
      finite = FALSE;
      break;
    }
  }
  if (finite)
    meta->flags = (GstPi0ActionFlags)(meta->flags & ~GST_PI0_ACTION_FLAG_NON_FINITE);
  else
    meta->flags = (GstPi0ActionFlags)(meta->flags | GST_PI0_ACTION_FLAG_NON_FINITE);
  return finite;
}
