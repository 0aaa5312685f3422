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
  m->model_time = GST_CLOCK_TIME_NONE;
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
  dst->model_time = src->model_time;
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
 * gst_pi0_action_flags_get_type:
 *
 * The #GstPi0ActionFlags as a GType, for bindings (nicks `non-finite`, `untrained`).
 *
 * Since: 0.4
 */
GType
gst_pi0_action_flags_get_type (void)
{
  static gsize id = 0;
  static const GFlagsValue values[] = {
      {GST_PI0_ACTION_FLAG_NONE, "GST_PI0_ACTION_FLAG_NONE", "none"},
      {GST_PI0_ACTION_FLAG_NON_FINITE, "GST_PI0_ACTION_FLAG_NON_FINITE", "non-finite"},
      {GST_PI0_ACTION_FLAG_UNTRAINED, "GST_PI0_ACTION_FLAG_UNTRAINED", "untrained"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_flags_register_static ("GstPi0ActionFlags", values));
  return (GType)id;
}

/**
 * gst_buffer_get_pi0_action_meta:
 * @buffer: a #GstBuffer
 *
 * Returns: (transfer none) (nullable): the action meta of @buffer, valid while @buffer lives
 *   and keeps it, or %NULL.
 */
GstPi0ActionMeta *
gst_buffer_get_pi0_action_meta (GstBuffer *buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstPi0ActionMeta *)gst_buffer_get_meta (buffer, GST_PI0_ACTION_META_API_TYPE);
}

/**
 * gst_buffer_add_pi0_action_meta: (skip)
 * @buffer: a writable buffer
 * @horizon: rows
 * @dim: columns
 * @actions: (nullable): @horizon × @dim values to copy, or %NULL for zeros
 * @model_id: (nullable): the policy's identifier
 *
 * Bindings use gst_buffer_add_pi0_action_meta_full(), which knows the length of @actions.
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
 * gst_pi0_action_meta_get_action: (skip)
 *
 * Bindings use gst_pi0_action_meta_get_row(), which gives the length.
 *
 * Returns: (transfer none) (nullable): the @dim values of step @step, or %NULL.
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

/**
 * gst_buffer_add_pi0_action_meta_full:
 * @buffer: a writable buffer
 * @horizon: rows, > 0
 * @dim: columns, > 0
 * @actions: (array length=n_actions) (nullable): @horizon × @dim values to copy, row-major, or
 *   %NULL for zeros
 * @n_actions: number of values in @actions: @horizon × @dim (ignored when @actions is %NULL)
 * @model_id: (nullable): the policy's identifier
 * @error: return location for a #GST_PI0_ERROR
 *
 * gst_buffer_add_pi0_action_meta() with the length of @actions, and bad input reported as an
 * error (a zero size, a length that is not @horizon × @dim, a buffer that is not writable)
 * rather than as a GLib critical: what bindings call.
 *
 * Returns: (transfer none) (nullable): the meta, or %NULL with @error set.
 *
 * Since: 0.4
 */
GstPi0ActionMeta *
gst_buffer_add_pi0_action_meta_full (GstBuffer *buffer, guint horizon, guint dim,
                                     const gfloat *actions, gsize n_actions, const gchar *model_id,
                                     GError **error)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (horizon == 0 || dim == 0) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "an action chunk needs horizon > 0 and dim > 0 (got %u x %u)", horizon, dim);
    return NULL;
  }
  if (actions && n_actions != (gsize)horizon * dim) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "%" G_GSIZE_FORMAT " action values given for horizon %u x dim %u (%" G_GSIZE_FORMAT
                 " expected)",
                 n_actions, horizon, dim, (gsize)horizon * dim);
    return NULL;
  }
  if (!gst_pi0_meta_check_writable (buffer, error))
    return NULL;
  return gst_buffer_add_pi0_action_meta (buffer, horizon, dim, actions, model_id);
}

/**
 * gst_pi0_action_meta_get_actions:
 * @meta: an action meta
 * @n_actions: (out): number of values: horizon × dim
 *
 * Returns: (transfer none) (array length=n_actions): the chunk, row-major (horizon rows of dim
 *   values), owned by @meta: a Python list of floats. For a numpy array without a copy, see
 *   gst_buffer_get_pi0_actions().
 *
 * Since: 0.4
 */
const gfloat *
gst_pi0_action_meta_get_actions (const GstPi0ActionMeta *meta, gsize *n_actions)
{
  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (n_actions != NULL, NULL);
  *n_actions = meta->actions ? (gsize)meta->horizon * meta->dim : 0;
  return meta->actions;
}

/**
 * gst_pi0_action_meta_get_row:
 * @meta: an action meta
 * @row: the step, from 0 to horizon - 1
 * @dim: (out): number of values (the meta's dim; 0 past the last row)
 *
 * Returns: (transfer none) (array length=dim) (nullable): the values of step @row, owned by
 *   @meta, or %NULL past the last row.
 *
 * Since: 0.4
 */
const gfloat *
gst_pi0_action_meta_get_row (const GstPi0ActionMeta *meta, guint row, guint *dim)
{
  const gfloat *values;

  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (dim != NULL, NULL);
  values = gst_pi0_action_meta_get_action (meta, row);
  *dim = values ? meta->dim : 0;
  return values;
}

/**
 * gst_buffer_get_pi0_actions:
 * @buffer: a buffer with a #GstPi0ActionMeta
 *
 * The action chunk of @buffer's action meta as the one read-only memory of a new buffer,
 * without a copy: horizon × dim native-endian float32, row-major. The new buffer holds a
 * reference to @buffer, so the values stay valid (and @buffer stays unwritable, so no one can
 * remove the meta) for as long as the new buffer lives, whatever happens to the caller's
 * @buffer. This is how Python reads a chunk as a numpy array (docs/meta.md).
 *
 * Returns: (transfer full) (nullable): the values, or %NULL when @buffer has no action meta.
 *
 * Since: 0.4
 */
GstBuffer *
gst_buffer_get_pi0_actions (GstBuffer *buffer)
{
  GstPi0ActionMeta *meta;
  GstBuffer *values;
  gsize size;

  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  meta = gst_buffer_get_pi0_action_meta (buffer);
  if (!meta || !meta->actions)
    return NULL;
  size = (gsize)meta->horizon * meta->dim * sizeof (gfloat);
  values = gst_buffer_new ();
  gst_buffer_append_memory (values, gst_memory_new_wrapped (GST_MEMORY_FLAG_READONLY, meta->actions,
                                                            size, 0, size, gst_buffer_ref (buffer),
                                                            (GDestroyNotify)gst_buffer_unref));
  return values;
}
