/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>
#include <gst/pi0/gstpi0caps.h>
#include <gst/pi0/gstpi0error.h>
#include <gst/video/video.h>

G_BEGIN_DECLS

/**
 * GstPi0ViewFlags:
 * @GST_PI0_VIEW_FLAG_NONE: no flag
 * @GST_PI0_VIEW_FLAG_VALID: the view has a frame in this observation; without it the view is
 *   masked (the model must ignore it) and contributes no memory to the buffer
 * @GST_PI0_VIEW_FLAG_CUDA: the frame lives in `memory:CUDAMemory`
 * @GST_PI0_VIEW_FLAG_SKEWED: the frame is older than the muxer's `max-skew` (but within
 *   `max-staleness`): valid, but not captured together with the base frame
 */
typedef enum {
  GST_PI0_VIEW_FLAG_NONE = 0,
  GST_PI0_VIEW_FLAG_VALID = (1 << 0),
  GST_PI0_VIEW_FLAG_CUDA = (1 << 1),
  GST_PI0_VIEW_FLAG_SKEWED = (1 << 2),
} GstPi0ViewFlags;

GST_PI0_API GType gst_pi0_view_flags_get_type (void);
#define GST_TYPE_PI0_VIEW_FLAGS (gst_pi0_view_flags_get_type ())

/**
 * GstPi0View:
 * @name: the view's name (`main`, `side`, `top`), NUL-terminated; bindings read it with
 *   gst_pi0_view_get_name()
 * @flags: #GstPi0ViewFlags
 * @info: format, size, plane offsets and strides of this frame. Offsets count from the start of
 *   the view's first memory, the view's memories taken as one span
 * @pts: the frame's PTS in its input segment
 * @capture_time: the frame's running time (when it was captured, for live sources)
 * @mem_index: index of the view's first memory in the observation buffer
 * @n_mem: number of memories the view occupies (0 when not valid)
 *
 * One camera view inside a #GstPi0ObservationMeta.
 */
typedef struct {
  gchar name[GST_PI0_VIEW_NAME_LEN];
  GstPi0ViewFlags flags;
  GstVideoInfo info;
#ifdef __GI_SCANNER__
  /*< private >*/
  /* Only what g-ir-scanner reads: the typelib's GstVideoInfo (GStreamer 1.22's GstVideo-1.0)
   * leaves out its private ABI union of GST_PADDING pointers, so without this the typelib would
   * place every field after @info, and every view after the first, too early. The Python tests
   * hold the typelib's offsets against the C compiler's. */
  gpointer _gi_video_info_abi[GST_PADDING];
  /*< public >*/
#endif
  GstClockTime pts;
  GstClockTime capture_time;
  guint mem_index;
  guint n_mem;
  /*< private >*/
  gpointer _gst_reserved[GST_PADDING];
} GstPi0View;

/**
 * GstPi0StateFlags:
 * @GST_PI0_STATE_FLAG_NONE: no state (no `state` pad, or no sample yet)
 * @GST_PI0_STATE_FLAG_PRESENT: @state holds @state_dim values
 * @GST_PI0_STATE_FLAG_STALE: the sample is older than the muxer's `max-state-age`
 */
typedef enum {
  GST_PI0_STATE_FLAG_NONE = 0,
  GST_PI0_STATE_FLAG_PRESENT = (1 << 0),
  GST_PI0_STATE_FLAG_STALE = (1 << 1),
} GstPi0StateFlags;

GST_PI0_API GType gst_pi0_state_flags_get_type (void);
#define GST_TYPE_PI0_STATE_FLAGS (gst_pi0_state_flags_get_type ())

typedef struct _GstPi0ObservationMeta GstPi0ObservationMeta;

/**
 * GstPi0ObservationMeta:
 * @meta: parent #GstMeta
 * @version: #GST_PI0_META_VERSION of the library that made the meta
 * @sequence: observation number, counting from 0 at each start of the muxer
 * @observation_time: running time of the observation (the base view's frame)
 * @n_views: number of entries in @views
 * @views: the views, in view order; bindings read them with
 *   gst_pi0_observation_meta_get_view()
 * @state_flags: #GstPi0StateFlags
 * @state_dim: number of floats in @state
 * @state: (type gpointer): the robot state vector (owned by the meta; %NULL when absent);
 *   bindings read it with gst_pi0_observation_meta_get_state()
 * @state_time: running time of the state sample
 * @muxed_time: running time at which the muxer pushed the observation (#GST_CLOCK_TIME_NONE
 *   without a clock); with @observation_time it gives the mux wait. Since: 0.2
 *
 * One synchronized observation: which views it holds, where their frames are, and the robot
 * state that goes with them. Survives queue, tee, gst_buffer_copy() and
 * gst_buffer_make_writable() (copies are deep).
 */
struct _GstPi0ObservationMeta {
  GstMeta meta;
  guint version;
  guint64 sequence;
  GstClockTime observation_time;
  guint n_views;
#ifndef __GI_SCANNER__
  GstPi0View views[GST_PI0_MAX_VIEWS];
#else
  /* PyGObject cannot read an array of structs inside a struct (it logs a critical and gives an
   * empty list): under another name the field keeps its place in the typelib while `views`
   * is an AttributeError in Python. Bindings read the views with
   * gst_pi0_observation_meta_get_view(). */
  /*< private >*/
  GstPi0View _gi_views[GST_PI0_MAX_VIEWS];
  /*< public >*/
#endif
  GstPi0StateFlags state_flags;
  guint state_dim;
  gfloat *state;
  GstClockTime state_time;
  GstClockTime muxed_time;
  /*< private >*/
  gpointer _gst_reserved[GST_PADDING_LARGE];
};

GST_PI0_API GType gst_pi0_observation_meta_api_get_type (void);
#define GST_PI0_OBSERVATION_META_API_TYPE (gst_pi0_observation_meta_api_get_type ())

GST_PI0_API const GstMetaInfo *gst_pi0_observation_meta_get_info (void);
#define GST_PI0_OBSERVATION_META_INFO (gst_pi0_observation_meta_get_info ())

GST_PI0_API GstPi0ObservationMeta *gst_buffer_get_pi0_observation_meta (GstBuffer *buffer);

GST_PI0_API GstPi0ObservationMeta *gst_buffer_add_pi0_observation_meta (GstBuffer *buffer);

GST_PI0_API guint gst_pi0_observation_meta_get_n_views (const GstPi0ObservationMeta *meta);

GST_PI0_API const GstPi0View *gst_pi0_observation_meta_get_view (const GstPi0ObservationMeta *meta,
                                                                 guint index);

GST_PI0_API gint gst_pi0_observation_meta_find_view (const GstPi0ObservationMeta *meta,
                                                     const gchar *name);

GST_PI0_API GstPi0View *gst_pi0_observation_meta_add_view (GstPi0ObservationMeta *meta,
                                                           const gchar *name);

GST_PI0_API GstPi0View *
gst_pi0_observation_meta_add_frame (GstPi0ObservationMeta *meta, GstBuffer *observation,
                                    const gchar *name, const GstVideoInfo *info, GstBuffer *frame,
                                    GstPi0ViewFlags flags, GstClockTime capture_time);

GST_PI0_API gboolean gst_pi0_observation_meta_map_view (const GstPi0ObservationMeta *meta,
                                                        GstBuffer *buffer, guint index,
                                                        GstVideoFrame *frame, GstMapFlags flags);

GST_PI0_API void gst_pi0_observation_meta_set_state (GstPi0ObservationMeta *meta,
                                                     const gfloat *state, guint dim,
                                                     GstClockTime state_time,
                                                     GstPi0StateFlags flags);

GST_PI0_API const gfloat *gst_pi0_observation_meta_get_state (const GstPi0ObservationMeta *meta,
                                                              guint *dim);

GST_PI0_API GstCaps *gst_pi0_observation_caps_new (const gchar *const *view_names, guint n_views,
                                                   const gchar *base_view, guint state_dim,
                                                   gint fps_n, gint fps_d, gboolean cuda);

/* Introspectable companions (docs/meta.md, "From Python"). */
GST_PI0_API const gchar *gst_pi0_view_get_name (const GstPi0View *view);

GST_PI0_API GstBuffer *gst_pi0_observation_meta_get_view_buffer (const GstPi0ObservationMeta *meta,
                                                                 GstBuffer *buffer, guint index,
                                                                 GError **error);

G_END_DECLS
