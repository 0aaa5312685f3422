/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "tests/libs/gstpi0/gi/pi0testoracle.h"

#include <gst/pi0/pi0.h>
#include <math.h>
#include <stddef.h>

/* Floats as the shortest text that reads back as the same float32; NaN and infinities as
 * strings (JSON has none). */
static void
append_float (GString *s, gfloat v)
{
  if (isnan (v))
    g_string_append (s, "\"nan\"");
  else if (isinf (v))
    g_string_append (s, v > 0 ? "\"inf\"" : "\"-inf\"");
  else
    g_string_append_printf (s, "%.9g", (double)v);
}

static void
append_floats (GString *s, const gfloat *v, gsize n)
{
  g_string_append_c (s, '[');
  for (gsize i = 0; i < n; i++) {
    if (i)
      g_string_append_c (s, ',');
    append_float (s, v[i]);
  }
  g_string_append_c (s, ']');
}

static void
append_string (GString *s, const gchar *text)
{
  g_string_append_c (s, '"');
  for (const gchar *c = text; c && *c; c++) {
    if (*c == '"' || *c == '\\')
      g_string_append_printf (s, "\\%c", *c);
    else if ((guchar)*c < 0x20)
      g_string_append_printf (s, "\\u%04x", *c);
    else
      g_string_append_c (s, *c);
  }
  g_string_append_c (s, '"');
}

static void
describe_observation (GString *s, const GstPi0ObservationMeta *m, GstBuffer *buffer)
{
  guint dim = 0;
  const gfloat *state = gst_pi0_observation_meta_get_state (m, &dim);

  g_string_append_printf (s,
                          "{\"version\":%u,\"sequence\":%" G_GUINT64_FORMAT
                          ",\"observation_time\":%" G_GUINT64_FORMAT ",\"n_views\":%u",
                          m->version, m->sequence, m->observation_time,
                          gst_pi0_observation_meta_get_n_views (m));
  g_string_append_printf (s,
                          ",\"state_flags\":%u,\"state_dim\":%u,\"state_time\":%" G_GUINT64_FORMAT
                          ",\"muxed_time\":%" G_GUINT64_FORMAT ",\"state\":",
                          (guint)m->state_flags, m->state_dim, m->state_time, m->muxed_time);
  if (state)
    append_floats (s, state, dim);
  else
    g_string_append (s, "null");
  g_string_append (s, ",\"views\":[");
  for (guint i = 0; i < gst_pi0_observation_meta_get_n_views (m); i++) {
    const GstPi0View *v = gst_pi0_observation_meta_get_view (m, i);
    GstVideoFrame frame;
    guint64 sum = 0;
    gboolean mapped;

    /* The pixels' byte sum over each plane's rows as the meta lays them out: Python sums the
     * same bytes through the view's buffer. */
    mapped = gst_pi0_observation_meta_map_view (m, buffer, i, &frame, GST_MAP_READ);
    if (mapped) {
      for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES (&frame); p++) {
        const guint8 *data = (const guint8 *)GST_VIDEO_FRAME_PLANE_DATA (&frame, p);
        gint rows = GST_VIDEO_FRAME_COMP_HEIGHT (&frame, p);
        gint row_bytes =
            GST_VIDEO_FRAME_COMP_WIDTH (&frame, p) * GST_VIDEO_FRAME_COMP_PSTRIDE (&frame, p);
        for (gint y = 0; y < rows; y++)
          for (gint x = 0; x < row_bytes; x++)
            sum += data[(gsize)y * GST_VIDEO_FRAME_PLANE_STRIDE (&frame, p) + x];
      }
      gst_video_frame_unmap (&frame);
    }
    g_string_append_printf (s, "%s{\"name\":", i ? "," : "");
    append_string (s, v->name);
    g_string_append_printf (
        s,
        ",\"flags\":%u,\"format\":\"%s\",\"width\":%d,\"height\":%d,\"n_planes\":%u,"
        "\"stride\":[%d,%d,%d,%d],\"offset\":[%" G_GSIZE_FORMAT ",%" G_GSIZE_FORMAT
        ",%" G_GSIZE_FORMAT ",%" G_GSIZE_FORMAT "],\"pts\":%" G_GUINT64_FORMAT
        ",\"capture_time\":%" G_GUINT64_FORMAT ",\"mem_index\":%u,\"n_mem\":%u,\"mapped\":%s,"
        "\"pixel_sum\":%" G_GUINT64_FORMAT "}",
        (guint)v->flags,
        GST_VIDEO_INFO_FORMAT (&v->info) == GST_VIDEO_FORMAT_UNKNOWN
            ? "unknown"
            : gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&v->info)),
        GST_VIDEO_INFO_WIDTH (&v->info), GST_VIDEO_INFO_HEIGHT (&v->info),
        GST_VIDEO_INFO_N_PLANES (&v->info), v->info.stride[0], v->info.stride[1], v->info.stride[2],
        v->info.stride[3], v->info.offset[0], v->info.offset[1], v->info.offset[2],
        v->info.offset[3], v->pts, v->capture_time, v->mem_index, v->n_mem,
        mapped ? "true" : "false", sum);
  }
  g_string_append (s, "]}");
}

static void
describe_tensor (GString *s, const GstPi0TensorMeta *m)
{
  g_string_append_printf (
      s,
      "{\"version\":%u,\"dtype\":%d,\"dtype_name\":\"%s\",\"device\":%d,"
      "\"device_id\":%d,\"n_elements\":%" G_GSIZE_FORMAT ",\"nbytes\":%" G_GSIZE_FORMAT
      ",\"prepared_time\":%" G_GUINT64_FORMAT ",\"shape\":[",
      m->version, (gint)m->dtype, gst_pi0_dtype_to_string (m->dtype), (gint)m->device, m->device_id,
      gst_pi0_tensor_meta_get_n_elements (m), gst_pi0_tensor_meta_get_nbytes (m), m->prepared_time);
  for (guint i = 0; i < m->n_dims; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "", m->shape[i]);
  g_string_append (s, "],\"masks\":[");
  for (guint i = 0; i < m->n_masks; i++)
    g_string_append_printf (s, "%s%s", i ? "," : "", m->image_masks[i] ? "true" : "false");
  g_string_append (s, "],\"data\":");
  if (m->device == GST_PI0_DEVICE_CPU && m->dtype == GST_PI0_DTYPE_FLOAT32)
    append_floats (s, (const gfloat *)m->data, gst_pi0_tensor_meta_get_n_elements (m));
  else if (m->device == GST_PI0_DEVICE_CPU && m->dtype == GST_PI0_DTYPE_UINT8) {
    g_string_append_c (s, '[');
    for (gsize i = 0; i < gst_pi0_tensor_meta_get_n_elements (m); i++)
      g_string_append_printf (s, "%s%u", i ? "," : "", ((const guint8 *)m->data)[i]);
    g_string_append_c (s, ']');
  } else
    g_string_append (s, "null");
  g_string_append_c (s, '}');
}

static void
describe_action (GString *s, const GstPi0ActionMeta *m)
{
  g_string_append_printf (
      s,
      "{\"version\":%u,\"sequence\":%" G_GUINT64_FORMAT ",\"observation_time\":%" G_GUINT64_FORMAT
      ",\"inference_time\":%" G_GUINT64_FORMAT ",\"done_time\":%" G_GUINT64_FORMAT
      ",\"model_time\":%" G_GUINT64_FORMAT ",\"horizon\":%u,\"dim\":%u,\"flags\":%u,\"model_id\":",
      m->version, m->sequence, m->observation_time, m->inference_time, m->done_time, m->model_time,
      m->horizon, m->dim, (guint)m->flags);
  append_string (s, m->model_id);
  g_string_append (s, ",\"actions\":");
  append_floats (s, m->actions, (gsize)m->horizon * m->dim);
  g_string_append (s, ",\"rows\":[");
  for (guint r = 0; r < m->horizon; r++) {
    g_string_append (s, r ? "," : "");
    append_floats (s, gst_pi0_action_meta_get_action (m, r), m->dim);
  }
  g_string_append (s, "]}");
}

static void
describe_request (GString *s, const GstPi0RequestMeta *m)
{
  g_string_append_printf (s, "{\"version\":%u,\"server\":", m->version);
  append_string (s, m->server);
  g_string_append_printf (s,
                          ",\"client_id\":%" G_GUINT64_FORMAT ",\"request_id\":%" G_GUINT64_FORMAT
                          ",\"seed\":%" G_GUINT64_FORMAT
                          ",\"flags\":%u,\"received_time\":%" G_GUINT64_FORMAT ",\"prompt\":",
                          m->client_id, m->request_id, m->seed, (guint)m->flags, m->received_time);
  append_string (s, m->prompt);
  g_string_append (s, ",\"error\":");
  if (m->error)
    append_string (s, m->error);
  else
    g_string_append (s, "null");
  g_string_append_c (s, '}');
}

/**
 * pi0_test_oracle_describe:
 * @buffer: a buffer
 *
 * Returns: (transfer full): JSON: each gst-pi0 meta of @buffer as the C API and its fields
 *   give it (`null` for an absent one).
 */
gchar *
pi0_test_oracle_describe (GstBuffer *buffer)
{
  GString *s = g_string_new ("{\"observation\":");
  GstPi0ObservationMeta *obs = gst_buffer_get_pi0_observation_meta (buffer);
  GstPi0TensorMeta *tensor = gst_buffer_get_pi0_tensor_meta (buffer);
  GstPi0ActionMeta *action = gst_buffer_get_pi0_action_meta (buffer);
  GstPi0RequestMeta *request = gst_buffer_get_pi0_request_meta (buffer);

  if (obs)
    describe_observation (s, obs, buffer);
  else
    g_string_append (s, "null");
  g_string_append (s, ",\"tensor\":");
  if (tensor)
    describe_tensor (s, tensor);
  else
    g_string_append (s, "null");
  g_string_append (s, ",\"action\":");
  if (action)
    describe_action (s, action);
  else
    g_string_append (s, "null");
  g_string_append (s, ",\"request\":");
  if (request)
    describe_request (s, request);
  else
    g_string_append (s, "null");
  g_string_append_c (s, '}');
  return g_string_free (s, FALSE);
}

#define FIELD(T, f) g_string_append_printf (s, "\"%s\":%" G_GSIZE_FORMAT ",", #f, offsetof (T, f))
#define STRUCT_BEGIN(T)                                                                            \
  g_string_append_printf (s, "\"%s\":{\"size\":%" G_GSIZE_FORMAT ",", #T, sizeof (T))
#define STRUCT_END() (s->str[s->len - 1] = '}', g_string_append_c (s, ','))

/**
 * pi0_test_oracle_layout:
 *
 * Returns: (transfer full): JSON: `{"GstPi0View": {"size": N, "name": offset, ...}, ...}` as
 *   the C compiler lays the public structs out.
 */
gchar *
pi0_test_oracle_layout (void)
{
  GString *s = g_string_new ("{");

  STRUCT_BEGIN (GstPi0View);
  FIELD (GstPi0View, name);
  FIELD (GstPi0View, flags);
  FIELD (GstPi0View, info);
  FIELD (GstPi0View, pts);
  FIELD (GstPi0View, capture_time);
  FIELD (GstPi0View, mem_index);
  FIELD (GstPi0View, n_mem);
  STRUCT_END ();
  STRUCT_BEGIN (GstPi0ObservationMeta);
  FIELD (GstPi0ObservationMeta, version);
  FIELD (GstPi0ObservationMeta, sequence);
  FIELD (GstPi0ObservationMeta, observation_time);
  FIELD (GstPi0ObservationMeta, n_views);
  FIELD (GstPi0ObservationMeta, views);
  FIELD (GstPi0ObservationMeta, state_flags);
  FIELD (GstPi0ObservationMeta, state_dim);
  FIELD (GstPi0ObservationMeta, state);
  FIELD (GstPi0ObservationMeta, state_time);
  FIELD (GstPi0ObservationMeta, muxed_time);
  STRUCT_END ();
  STRUCT_BEGIN (GstPi0TensorMeta);
  FIELD (GstPi0TensorMeta, version);
  FIELD (GstPi0TensorMeta, dtype);
  FIELD (GstPi0TensorMeta, device);
  FIELD (GstPi0TensorMeta, device_id);
  FIELD (GstPi0TensorMeta, n_dims);
  FIELD (GstPi0TensorMeta, shape);
  FIELD (GstPi0TensorMeta, data);
  FIELD (GstPi0TensorMeta, storage);
  FIELD (GstPi0TensorMeta, n_masks);
  FIELD (GstPi0TensorMeta, image_masks);
  FIELD (GstPi0TensorMeta, ready_event);
  FIELD (GstPi0TensorMeta, prepared_time);
  STRUCT_END ();
  STRUCT_BEGIN (GstPi0ActionMeta);
  FIELD (GstPi0ActionMeta, version);
  FIELD (GstPi0ActionMeta, sequence);
  FIELD (GstPi0ActionMeta, observation_time);
  FIELD (GstPi0ActionMeta, inference_time);
  FIELD (GstPi0ActionMeta, horizon);
  FIELD (GstPi0ActionMeta, dim);
  FIELD (GstPi0ActionMeta, actions);
  FIELD (GstPi0ActionMeta, model_id);
  FIELD (GstPi0ActionMeta, flags);
  FIELD (GstPi0ActionMeta, done_time);
  FIELD (GstPi0ActionMeta, model_time);
  STRUCT_END ();
  STRUCT_BEGIN (GstPi0RequestMeta);
  FIELD (GstPi0RequestMeta, version);
  FIELD (GstPi0RequestMeta, server);
  FIELD (GstPi0RequestMeta, client_id);
  FIELD (GstPi0RequestMeta, request_id);
  FIELD (GstPi0RequestMeta, prompt);
  FIELD (GstPi0RequestMeta, seed);
  FIELD (GstPi0RequestMeta, flags);
  FIELD (GstPi0RequestMeta, received_time);
  FIELD (GstPi0RequestMeta, error);
  STRUCT_END ();
  s->str[s->len - 1] = '}';
  return g_string_free (s, FALSE);
}

/**
 * pi0_test_oracle_make_buffer:
 *
 * Returns: (transfer full): a buffer made in C with all four metas and a distinct value in
 *   every field: an observation of an 8x4 RGB view, a masked view and a 6x4 I420 view whose
 *   planes are padded (stride 8), a 2x3x4x4 float32 tensor, a 3x2 action chunk with a NaN, a
 *   request with an error.
 */
GstBuffer *
pi0_test_oracle_make_buffer (void)
{
  GstBuffer *buf = gst_buffer_new ();
  GstBuffer *frame;
  GstVideoInfo rgb, yuv;
  GstPi0ObservationMeta *obs;
  GstPi0View *v;
  GstPi0TensorStorage *storage;
  GstPi0TensorMeta *tensor;
  GstPi0ActionMeta *action;
  GstPi0RequestMeta *request;
  const gfloat state[4] = {0.5f, -1.25f, 3.0e-7f, 1234.5f};
  const gint64 shape[4] = {2, 3, 4, 4};
  const gboolean masks[3] = {TRUE, FALSE, TRUE};
  const gfloat actions[6] = {0.1f, -0.2f, 0.3f, NAN, 5.0f, -6.5f};
  gint strides[GST_VIDEO_MAX_PLANES] = {8, 8, 8, 0};

  obs = gst_buffer_add_pi0_observation_meta (buf);
  obs->sequence = 41;
  obs->observation_time = 3 * GST_SECOND + 17;
  obs->muxed_time = 3 * GST_SECOND + 5000017;

  gst_video_info_set_format (&rgb, GST_VIDEO_FORMAT_RGB, 8, 4);
  frame = gst_buffer_new_allocate (NULL, GST_VIDEO_INFO_SIZE (&rgb), NULL);
  for (gsize i = 0; i < GST_VIDEO_INFO_SIZE (&rgb); i++)
    gst_buffer_memset (frame, i, (guint8)(i * 7), 1);
  GST_BUFFER_PTS (frame) = 11 * GST_MSECOND;
  v = gst_pi0_observation_meta_add_frame (obs, buf, "main", &rgb, frame, GST_PI0_VIEW_FLAG_NONE,
                                          3 * GST_SECOND);
  gst_buffer_unref (frame);
  (void)v;

  gst_pi0_observation_meta_add_view (obs, "side");

  /* A padded I420 layout: rows of 8 bytes for 6 pixels, as a decoder might give it. */
  gst_video_info_set_format (&yuv, GST_VIDEO_FORMAT_I420, 6, 4);
  for (guint p = 0; p < 3; p++)
    yuv.stride[p] = strides[p];
  yuv.offset[0] = 0;
  yuv.offset[1] = 8 * 4;
  yuv.offset[2] = 8 * 4 + 8 * 2;
  yuv.size = 8 * 4 + 8 * 2 * 2;
  frame = gst_buffer_new_allocate (NULL, yuv.size, NULL);
  for (gsize i = 0; i < yuv.size; i++)
    gst_buffer_memset (frame, i, (guint8)(255 - i), 1);
  GST_BUFFER_PTS (frame) = 12 * GST_MSECOND;
  v = gst_pi0_observation_meta_add_frame (obs, buf, "top", &yuv, frame, GST_PI0_VIEW_FLAG_SKEWED,
                                          2 * GST_SECOND + 900 * GST_MSECOND);
  gst_buffer_unref (frame);

  gst_pi0_observation_meta_set_state (obs, state, 4, 2 * GST_SECOND + 990 * GST_MSECOND,
                                      GST_PI0_STATE_FLAG_STALE);

  storage = gst_pi0_tensor_storage_new_host (2 * 3 * 4 * 4 * sizeof (gfloat));
  for (guint i = 0; i < 2 * 3 * 4 * 4; i++)
    ((gfloat *)gst_pi0_tensor_storage_get_data (storage))[i] = (gfloat)i / 8.0f - 2.0f;
  tensor = gst_buffer_add_pi0_tensor_meta (buf, storage, GST_PI0_DTYPE_FLOAT32, 4, shape);
  gst_pi0_tensor_storage_unref (storage);
  gst_pi0_tensor_meta_set_masks (tensor, masks, 3);
  tensor->prepared_time = 3 * GST_SECOND + 6000017;

  action = gst_buffer_add_pi0_action_meta (buf, 3, 2, actions, "oracle-model");
  action->sequence = 41;
  action->observation_time = obs->observation_time;
  action->inference_time = 9 * GST_MSECOND;
  action->done_time = 3 * GST_SECOND + 16000017;
  action->model_time = 8 * GST_MSECOND + 17;
  action->flags = (GstPi0ActionFlags)(action->flags | GST_PI0_ACTION_FLAG_UNTRAINED);

  request = gst_buffer_add_pi0_request_meta (buf, "oracle-server", 3, 9, "stack the \"cups\"", 77);
  request->flags = GST_PI0_REQUEST_FLAG_CLIENT_SEED;
  request->received_time = 2 * GST_SECOND;
  gst_pi0_request_meta_set_error (request, "no actions: test");
  return buf;
}

/**
 * pi0_test_oracle_actions_address:
 * @buffer: a buffer with an action meta
 *
 * Returns: the address of the action meta's values (0 without one), to show that Python's
 *   numpy array reads them where they are.
 */
guint64
pi0_test_oracle_actions_address (GstBuffer *buffer)
{
  GstPi0ActionMeta *m = gst_buffer_get_pi0_action_meta (buffer);

  return m ? (guint64)(guintptr)m->actions : 0;
}

/**
 * pi0_test_oracle_make_device_tensor_buffer:
 *
 * Returns: (transfer full): a buffer whose tensor meta says its data is in CUDA memory (an
 *   address no one may read: the test only shows that Python is refused it).
 */
GstBuffer *
pi0_test_oracle_make_device_tensor_buffer (void)
{
  static guint8 never_read[64];
  const gint64 shape[1] = {16};
  GstBuffer *buf = gst_buffer_new ();
  GstPi0TensorStorage *storage = gst_pi0_tensor_storage_new (never_read, sizeof (never_read),
                                                             GST_PI0_DEVICE_CUDA, 0, NULL, NULL);

  gst_buffer_add_pi0_tensor_meta (buf, storage, GST_PI0_DTYPE_FLOAT32, 1, shape);
  gst_pi0_tensor_storage_unref (storage);
  return buf;
}
