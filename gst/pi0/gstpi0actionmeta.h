/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>
#include <gst/pi0/gstpi0caps.h>
#include <gst/pi0/gstpi0error.h>

G_BEGIN_DECLS

/**
 * GstPi0ActionFlags:
 * @GST_PI0_ACTION_FLAG_NONE: no flag
 * @GST_PI0_ACTION_FLAG_NON_FINITE: at least one value is NaN or infinite; a sink must not send
 *   any of the chunk
 * @GST_PI0_ACTION_FLAG_UNTRAINED: made by a demo model with random weights
 */
typedef enum {
  GST_PI0_ACTION_FLAG_NONE = 0,
  GST_PI0_ACTION_FLAG_NON_FINITE = (1 << 0),
  GST_PI0_ACTION_FLAG_UNTRAINED = (1 << 1),
} GstPi0ActionFlags;

GST_PI0_API GType gst_pi0_action_flags_get_type (void);
#define GST_TYPE_PI0_ACTION_FLAGS (gst_pi0_action_flags_get_type ())

typedef struct _GstPi0ActionMeta GstPi0ActionMeta;

/**
 * GstPi0ActionMeta:
 * @meta: parent #GstMeta
 * @version: #GST_PI0_META_VERSION of the library that made the meta
 * @sequence: sequence number of the observation the chunk answers
 * @observation_time: running time of that observation (its base frame's capture)
 * @inference_time: how long inference took, in nanoseconds
 * @horizon: number of future actions (rows of @actions)
 * @dim: values per action (columns of @actions), in the robot's native units and order
 * @actions: (type gpointer): @horizon × @dim float32, row-major, owned by the meta; bindings
 *   read it with gst_pi0_action_meta_get_actions() or gst_buffer_get_pi0_actions()
 * @model_id: identifies the policy that made the chunk (owned, never %NULL)
 * @flags: #GstPi0ActionFlags
 * @done_time: running time at which the chunk was attached (#GST_CLOCK_TIME_NONE without a
 *   clock). Since: 0.2
 * @model_time: how long the model's own pass took (vision, prefix, denoising), in nanoseconds;
 *   @inference_time minus it is the request's preparation (tokenizer, norm stats, transforms)
 *   and the actions' unnormalization. For chunks made in one batched pass, each carries the
 *   whole pass's time. #GST_CLOCK_TIME_NONE when unknown. Since: 0.3
 *
 * An action chunk, as `pi0infer` attaches it and `pi0actionsink` sends it.
 */
struct _GstPi0ActionMeta {
  GstMeta meta;
  guint version;
  guint64 sequence;
  GstClockTime observation_time;
  GstClockTime inference_time;
  guint horizon;
  guint dim;
  gfloat *actions;
  gchar *model_id;
  GstPi0ActionFlags flags;
  GstClockTime done_time;
  GstClockTime model_time;
  /*< private >*/
  gpointer _gst_reserved[GST_PADDING_LARGE - 1];
};

GST_PI0_API GType gst_pi0_action_meta_api_get_type (void);
#define GST_PI0_ACTION_META_API_TYPE (gst_pi0_action_meta_api_get_type ())

GST_PI0_API const GstMetaInfo *gst_pi0_action_meta_get_info (void);
#define GST_PI0_ACTION_META_INFO (gst_pi0_action_meta_get_info ())

GST_PI0_API GstPi0ActionMeta *gst_buffer_get_pi0_action_meta (GstBuffer *buffer);

GST_PI0_API GstPi0ActionMeta *gst_buffer_add_pi0_action_meta (GstBuffer *buffer, guint horizon,
                                                              guint dim, const gfloat *actions,
                                                              const gchar *model_id);

GST_PI0_API const gfloat *gst_pi0_action_meta_get_action (const GstPi0ActionMeta *meta, guint step);

GST_PI0_API gboolean gst_pi0_action_meta_check_finite (GstPi0ActionMeta *meta);

/* Introspectable companions (docs/meta.md, "From Python"). */
GST_PI0_API GstPi0ActionMeta *gst_buffer_add_pi0_action_meta_full (GstBuffer *buffer, guint horizon,
                                                                   guint dim, const gfloat *actions,
                                                                   gsize n_actions,
                                                                   const gchar *model_id,
                                                                   GError **error);

GST_PI0_API const gfloat *gst_pi0_action_meta_get_actions (const GstPi0ActionMeta *meta,
                                                           gsize *n_actions);

GST_PI0_API const gfloat *gst_pi0_action_meta_get_row (const GstPi0ActionMeta *meta, guint row,
                                                       guint *dim);

GST_PI0_API GstBuffer *gst_buffer_get_pi0_actions (GstBuffer *buffer);

G_END_DECLS
