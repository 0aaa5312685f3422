/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/pi0/gstpi0observationmeta.h"
#include "gst/pi0/gstpi0meta-private.h"

#include <string.h>

GST_DEBUG_CATEGORY_EXTERN (gst_pi0_meta_debug);
#define GST_CAT_DEFAULT gst_pi0_meta_debug

GType
gst_pi0_observation_meta_api_get_type (void)
{
  static GType type = 0;
  /* No tags: generic transforms (basetransform, videoconvert) keep the meta. */
  static const gchar *tags[] = {NULL};

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstPi0ObservationMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
gst_pi0_observation_meta_init (GstMeta *meta, gpointer params, GstBuffer *buffer)
{
  GstPi0ObservationMeta *m = (GstPi0ObservationMeta *)meta;

  m->version = GST_PI0_META_VERSION;
  m->sequence = 0;
  m->observation_time = GST_CLOCK_TIME_NONE;
  m->n_views = 0;
  memset (m->views, 0, sizeof (m->views));
  m->state_flags = GST_PI0_STATE_FLAG_NONE;
  m->state_dim = 0;
  m->state = NULL;
  m->state_time = GST_CLOCK_TIME_NONE;
  m->muxed_time = GST_CLOCK_TIME_NONE;
  return TRUE;
}

static void
gst_pi0_observation_meta_free (GstMeta *meta, GstBuffer *buffer)
{
  GstPi0ObservationMeta *m = (GstPi0ObservationMeta *)meta;

  g_clear_pointer (&m->state, g_free);
}

static gboolean
gst_pi0_observation_meta_transform (GstBuffer *dest, GstMeta *meta, GstBuffer *buffer, GQuark type,
                                    gpointer data)
{
  GstPi0ObservationMeta *src = (GstPi0ObservationMeta *)meta;
  GstPi0ObservationMeta *dst;

  if (!GST_META_TRANSFORM_IS_COPY (type))
    return FALSE;

  /* The views point at memories by index: a copy of part of the buffer breaks that. */
  {
    GstMetaTransformCopy *copy = (GstMetaTransformCopy *)data;
    if (copy->region && (copy->offset != 0 || copy->size != gst_buffer_get_size (buffer))) {
      GST_DEBUG ("not copying the observation meta into a region copy");
      return FALSE;
    }
  }

  dst = gst_buffer_add_pi0_observation_meta (dest);
  if (!dst)
    return FALSE;
  dst->version = src->version;
  dst->sequence = src->sequence;
  dst->observation_time = src->observation_time;
  dst->muxed_time = src->muxed_time;
  dst->n_views = src->n_views;
  memcpy (dst->views, src->views, sizeof (src->views));
  gst_pi0_observation_meta_set_state (dst, src->state, src->state_dim, src->state_time,
                                      src->state_flags);
  return TRUE;
}

const GstMetaInfo *
gst_pi0_observation_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **)&info)) {
    gst_pi0_meta_debug_ensure ();
    const GstMetaInfo *mi =
        gst_meta_register (GST_PI0_OBSERVATION_META_API_TYPE, "GstPi0ObservationMeta",
                           sizeof (GstPi0ObservationMeta), gst_pi0_observation_meta_init,
                           gst_pi0_observation_meta_free, gst_pi0_observation_meta_transform);
    g_once_init_leave ((GstMetaInfo **)&info, (GstMetaInfo *)mi);
  }
  return info;
}

/**
 * gst_pi0_view_flags_get_type:
 *
 * The #GstPi0ViewFlags as a GType, for bindings (nicks `valid`, `cuda`, `skewed`).
 *
 * Since: 0.4
 */
GType
gst_pi0_view_flags_get_type (void)
{
  static gsize id = 0;
  static const GFlagsValue values[] = {
      {GST_PI0_VIEW_FLAG_NONE, "GST_PI0_VIEW_FLAG_NONE", "none"},
      {GST_PI0_VIEW_FLAG_VALID, "GST_PI0_VIEW_FLAG_VALID", "valid"},
      {GST_PI0_VIEW_FLAG_CUDA, "GST_PI0_VIEW_FLAG_CUDA", "cuda"},
      {GST_PI0_VIEW_FLAG_SKEWED, "GST_PI0_VIEW_FLAG_SKEWED", "skewed"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_flags_register_static ("GstPi0ViewFlags", values));
  return (GType)id;
}

/**
 * gst_pi0_state_flags_get_type:
 *
 * The #GstPi0StateFlags as a GType, for bindings (nicks `present`, `stale`).
 *
 * Since: 0.4
 */
GType
gst_pi0_state_flags_get_type (void)
{
  static gsize id = 0;
  static const GFlagsValue values[] = {
      {GST_PI0_STATE_FLAG_NONE, "GST_PI0_STATE_FLAG_NONE", "none"},
      {GST_PI0_STATE_FLAG_PRESENT, "GST_PI0_STATE_FLAG_PRESENT", "present"},
      {GST_PI0_STATE_FLAG_STALE, "GST_PI0_STATE_FLAG_STALE", "stale"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_flags_register_static ("GstPi0StateFlags", values));
  return (GType)id;
}

/**
 * gst_buffer_get_pi0_observation_meta:
 * @buffer: a #GstBuffer
 *
 * Returns: (transfer none) (nullable): the observation meta of @buffer, valid while @buffer
 *   lives and keeps it, or %NULL.
 */
GstPi0ObservationMeta *
gst_buffer_get_pi0_observation_meta (GstBuffer *buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstPi0ObservationMeta *)gst_buffer_get_meta (buffer, GST_PI0_OBSERVATION_META_API_TYPE);
}

/**
 * gst_pi0_view_get_name:
 * @view: a view of a #GstPi0ObservationMeta
 *
 * Returns: (transfer none): the view's name (`main`, `side`, `top`), owned by @view: the
 *   @name field as a string, for bindings.
 *
 * Since: 0.4
 */
const gchar *
gst_pi0_view_get_name (const GstPi0View *view)
{
  g_return_val_if_fail (view != NULL, NULL);
  return view->name;
}

/**
 * gst_buffer_add_pi0_observation_meta:
 * @buffer: a writable #GstBuffer
 *
 * Returns: (transfer none): a new, empty observation meta on @buffer.
 */
GstPi0ObservationMeta *
gst_buffer_add_pi0_observation_meta (GstBuffer *buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstPi0ObservationMeta *)gst_buffer_add_meta (buffer, GST_PI0_OBSERVATION_META_INFO, NULL);
}

guint
gst_pi0_observation_meta_get_n_views (const GstPi0ObservationMeta *meta)
{
  g_return_val_if_fail (meta != NULL, 0);
  return meta->n_views;
}

/**
 * gst_pi0_observation_meta_get_view:
 *
 * Returns: (transfer none) (nullable): the view at @index, or %NULL past the last one.
 */
const GstPi0View *
gst_pi0_observation_meta_get_view (const GstPi0ObservationMeta *meta, guint index)
{
  g_return_val_if_fail (meta != NULL, NULL);
  if (index >= meta->n_views)
    return NULL;
  return &meta->views[index];
}

/**
 * gst_pi0_observation_meta_find_view:
 *
 * Returns: the index of the view called @name, or -1.
 */
gint
gst_pi0_observation_meta_find_view (const GstPi0ObservationMeta *meta, const gchar *name)
{
  g_return_val_if_fail (meta != NULL, -1);
  g_return_val_if_fail (name != NULL, -1);
  for (guint i = 0; i < meta->n_views; i++) {
    if (strncmp (meta->views[i].name, name, GST_PI0_VIEW_NAME_LEN) == 0)
      return (gint)i;
  }
  return -1;
}

/**
 * gst_pi0_observation_meta_add_view:
 * @name: the view's name, shorter than #GST_PI0_VIEW_NAME_LEN
 *
 * Appends an invalid (masked) view; the caller fills it in.
 *
 * Returns: (transfer none) (nullable): the new view, or %NULL when the meta is full.
 */
GstPi0View *
gst_pi0_observation_meta_add_view (GstPi0ObservationMeta *meta, const gchar *name)
{
  GstPi0View *v;

  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (name != NULL && strlen (name) < GST_PI0_VIEW_NAME_LEN, NULL);
  if (meta->n_views >= GST_PI0_MAX_VIEWS)
    return NULL;
  v = &meta->views[meta->n_views++];
  memset (v, 0, sizeof (*v));
  g_strlcpy (v->name, name, sizeof (v->name));
  gst_video_info_init (&v->info);
  v->pts = GST_CLOCK_TIME_NONE;
  v->capture_time = GST_CLOCK_TIME_NONE;
  return v;
}

/**
 * gst_pi0_observation_meta_add_frame:
 * @meta: the observation meta of @observation
 * @observation: the observation buffer (writable)
 * @name: the view's name, shorter than #GST_PI0_VIEW_NAME_LEN
 * @info: the frame's layout (format, size, plane offsets and strides over @frame's memories)
 * @frame: the frame: its memories are appended to @observation (references, no copy)
 * @flags: flags besides #GST_PI0_VIEW_FLAG_VALID, which is always set
 * @capture_time: the frame's running time (#GST_CLOCK_TIME_NONE when unknown)
 *
 * Appends a valid view holding @frame, as `pi0viewmux` makes them: the view's @pts is @frame's
 * PTS, its memories are @frame's, after those already in @observation. Call it once per valid
 * view, in view order; a masked view is gst_pi0_observation_meta_add_view() alone.
 *
 * Returns: (transfer none) (nullable): the new view, or %NULL when the meta is full.
 *
 * Since: 0.3
 */
GstPi0View *
gst_pi0_observation_meta_add_frame (GstPi0ObservationMeta *meta, GstBuffer *observation,
                                    const gchar *name, const GstVideoInfo *info, GstBuffer *frame,
                                    GstPi0ViewFlags flags, GstClockTime capture_time)
{
  GstPi0View *v;

  g_return_val_if_fail (GST_IS_BUFFER (observation), NULL);
  g_return_val_if_fail (info != NULL, NULL);
  g_return_val_if_fail (GST_IS_BUFFER (frame), NULL);
  v = gst_pi0_observation_meta_add_view (meta, name);
  if (!v)
    return NULL;
  v->flags = (GstPi0ViewFlags)(flags | GST_PI0_VIEW_FLAG_VALID);
  v->info = *info;
  v->pts = GST_BUFFER_PTS (frame);
  v->capture_time = capture_time;
  v->mem_index = gst_buffer_n_memory (observation);
  v->n_mem = gst_buffer_n_memory (frame);
  for (guint i = 0; i < v->n_mem; i++)
    gst_buffer_append_memory (observation, gst_memory_ref (gst_buffer_peek_memory (frame, i)));
  /* Appending memories tags a buffer for pools; an observation comes from none. */
  GST_BUFFER_FLAG_UNSET (observation, GST_BUFFER_FLAG_TAG_MEMORY);
  return v;
}

/* The view's memories as one buffer with a #GstVideoMeta of the recorded layout, or %NULL
 * (and @error set) when the view is masked or its layout does not fit in its memories. */
static GstBuffer *
gst_pi0_observation_meta_view_buffer (const GstPi0ObservationMeta *meta, GstBuffer *buffer,
                                      guint index, GError **error)
{
  const GstPi0View *v;
  GstBuffer *sub;
  gsize span = 0, needed = 0;

  v = gst_pi0_observation_meta_get_view (meta, index);
  if (!v) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID, "no view %u: the observation has %u",
                 index, meta->n_views);
    return NULL;
  }
  if (!(v->flags & GST_PI0_VIEW_FLAG_VALID) || v->n_mem == 0) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "view %u (%s) is masked: it has no frame in this observation", index, v->name);
    return NULL;
  }
  if (v->mem_index + v->n_mem > gst_buffer_n_memory (buffer)) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "view %u (%s) lies in memories %u..%u, the buffer has %u: is it the meta's "
                 "buffer?",
                 index, v->name, v->mem_index, v->mem_index + v->n_mem - 1,
                 gst_buffer_n_memory (buffer));
    return NULL;
  }

  sub = gst_buffer_new ();
  for (guint i = 0; i < v->n_mem; i++) {
    GstMemory *mem = gst_buffer_peek_memory (buffer, v->mem_index + i);
    span += gst_memory_get_sizes (mem, NULL, NULL);
    gst_buffer_append_memory (sub, gst_memory_ref (mem));
  }

  /* The last byte a plane reaches, so a lying stride cannot make anyone read past the end. */
  for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES (&v->info); p++) {
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gint rows;
    gsize end;

    gst_video_format_info_component (v->info.finfo, p, comp);
    rows = GST_VIDEO_FORMAT_INFO_SCALE_HEIGHT (v->info.finfo, comp[0],
                                               GST_VIDEO_INFO_HEIGHT (&v->info));
    if (GST_VIDEO_INFO_PLANE_STRIDE (&v->info, p) <= 0 || rows <= 0) {
      g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                   "view %u (%s): plane %u has stride %d and %d rows", index, v->name, p,
                   GST_VIDEO_INFO_PLANE_STRIDE (&v->info, p), rows);
      gst_buffer_unref (sub);
      return NULL;
    }
    end = GST_VIDEO_INFO_PLANE_OFFSET (&v->info, p) +
          (gsize)GST_VIDEO_INFO_PLANE_STRIDE (&v->info, p) * (gsize)rows;
    needed = MAX (needed, end);
  }
  if (needed > span) {
    GST_WARNING ("view %s: frame needs %" G_GSIZE_FORMAT " bytes, memories hold %" G_GSIZE_FORMAT,
                 v->name, needed, span);
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "view %u (%s): its layout needs %" G_GSIZE_FORMAT
                 " bytes, its memories hold %" G_GSIZE_FORMAT,
                 index, v->name, needed, span);
    gst_buffer_unref (sub);
    return NULL;
  }

  gst_buffer_add_video_meta_full (sub, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_INFO_FORMAT (&v->info),
                                  GST_VIDEO_INFO_WIDTH (&v->info), GST_VIDEO_INFO_HEIGHT (&v->info),
                                  GST_VIDEO_INFO_N_PLANES (&v->info), (gsize *)v->info.offset,
                                  (gint *)v->info.stride);
  return sub;
}

/**
 * gst_pi0_observation_meta_map_view: (skip)
 * @meta: the observation meta of @buffer
 * @buffer: the observation buffer
 * @index: view index
 * @frame: (out caller-allocates): the mapped frame, to release with gst_video_frame_unmap()
 * @flags: #GstMapFlags (add `GST_MAP_CUDA` for device pointers of CUDA memory)
 *
 * Maps one view's frame with the strides and offsets recorded in the meta. Bindings, which
 * cannot read a #GstVideoFrame's plane pointers, use
 * gst_pi0_observation_meta_get_view_buffer().
 *
 * Returns: %FALSE when the view is not valid, or its memories do not hold the frame the meta
 *   describes (they are never read past their end), or mapping fails.
 */
gboolean
gst_pi0_observation_meta_map_view (const GstPi0ObservationMeta *meta, GstBuffer *buffer,
                                   guint index, GstVideoFrame *frame, GstMapFlags flags)
{
  const GstPi0View *v;
  GstBuffer *sub;
  gboolean ok;

  g_return_val_if_fail (meta != NULL, FALSE);
  g_return_val_if_fail (GST_IS_BUFFER (buffer), FALSE);
  g_return_val_if_fail (frame != NULL, FALSE);

  sub = gst_pi0_observation_meta_view_buffer (meta, buffer, index, NULL);
  if (!sub)
    return FALSE;
  v = gst_pi0_observation_meta_get_view (meta, index);
  /* The frame holds its own reference to @sub. */
  ok = gst_video_frame_map (frame, &v->info, sub, flags);
  gst_buffer_unref (sub);
  return ok;
}

/**
 * gst_pi0_observation_meta_get_view_buffer:
 * @meta: the observation meta of @buffer
 * @buffer: the observation buffer
 * @index: view index
 * @error: return location for a #GST_PI0_ERROR
 *
 * One view's frame as a buffer of its own: the view's memories (references, no copy) and a
 * #GstVideoMeta with the plane offsets and strides recorded in @meta. What
 * gst_pi0_observation_meta_map_view() maps, for bindings: from Python, map it and read the
 * planes with numpy at the view's `info.offset` and `info.stride` (docs/meta.md). The buffer
 * holds its own references to the memories, so it stays valid after @buffer is gone.
 *
 * Returns: (transfer full) (nullable): the frame, or %NULL with @error set when the view does
 *   not exist, is masked, or its layout does not fit in its memories.
 *
 * Since: 0.4
 */
GstBuffer *
gst_pi0_observation_meta_get_view_buffer (const GstPi0ObservationMeta *meta, GstBuffer *buffer,
                                          guint index, GError **error)
{
  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return gst_pi0_observation_meta_view_buffer (meta, buffer, index, error);
}

/**
 * gst_pi0_observation_meta_set_state:
 * @state: (array length=dim) (nullable): the state vector, copied
 *
 * Sets (or, with @state %NULL, clears) the robot state of the observation.
 */
void
gst_pi0_observation_meta_set_state (GstPi0ObservationMeta *meta, const gfloat *state, guint dim,
                                    GstClockTime state_time, GstPi0StateFlags flags)
{
  g_return_if_fail (meta != NULL);

  g_clear_pointer (&meta->state, g_free);
  if (state && dim > 0) {
    meta->state = (gfloat *)g_memdup2 (state, sizeof (gfloat) * dim);
    meta->state_dim = dim;
    meta->state_flags = (GstPi0StateFlags)(flags | GST_PI0_STATE_FLAG_PRESENT);
  } else {
    meta->state_dim = 0;
    meta->state_flags = (GstPi0StateFlags)(flags & ~GST_PI0_STATE_FLAG_PRESENT);
  }
  meta->state_time = state_time;
}

/**
 * gst_pi0_observation_meta_get_state:
 * @dim: (out) (optional): number of values
 *
 * Returns: (transfer none) (nullable) (array length=dim): the state vector, or %NULL when
 *   there is none.
 */
const gfloat *
gst_pi0_observation_meta_get_state (const GstPi0ObservationMeta *meta, guint *dim)
{
  g_return_val_if_fail (meta != NULL, NULL);
  if (dim)
    *dim = meta->state ? meta->state_dim : 0;
  return meta->state;
}

/**
 * gst_pi0_observation_caps_new:
 * @view_names: (array length=n_views): the views, in view order
 * @base_view: the view whose frames pace the observations
 * @state_dim: values of the robot state (0: none)
 * @fps_n: the base view's frame rate numerator (0/1: variable, as a server's requests)
 * @fps_d: its denominator
 * @cuda: whether every view's frames are in `memory:CUDAMemory`
 *
 * The caps of an observation stream (#GST_PI0_OBSERVATION_MEDIA_TYPE): `views`, `view-names`,
 * `base-view`, `state-dim` and `framerate`, with the `memory:CUDAMemory` feature when @cuda.
 *
 * Returns: (transfer full): the caps.
 *
 * Since: 0.3
 */
GstCaps *
gst_pi0_observation_caps_new (const gchar *const *view_names, guint n_views, const gchar *base_view,
                              guint state_dim, gint fps_n, gint fps_d, gboolean cuda)
{
  GString *names = g_string_new (NULL);
  GstCaps *caps;

  g_return_val_if_fail (n_views == 0 || view_names != NULL, NULL);
  g_return_val_if_fail (base_view != NULL, NULL);
  for (guint v = 0; v < n_views; v++)
    g_string_append_printf (names, "%s%s", v ? "," : "", view_names[v]);
  caps = gst_caps_new_simple (GST_PI0_OBSERVATION_MEDIA_TYPE, "views", G_TYPE_INT, (gint)n_views,
                              "view-names", G_TYPE_STRING, names->str, "base-view", G_TYPE_STRING,
                              base_view, "state-dim", G_TYPE_INT, (gint)state_dim, "framerate",
                              GST_TYPE_FRACTION, fps_n, fps_d, NULL);
  g_string_free (names, TRUE);
  if (cuda)
    gst_caps_set_features (caps, 0, gst_caps_features_new ("memory:CUDAMemory", NULL));
  return caps;
}
