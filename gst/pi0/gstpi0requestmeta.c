/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/pi0/gstpi0requestmeta.h"
#include "gst/pi0/gstpi0caps.h"
#include "gst/pi0/gstpi0meta-private.h"

GType
gst_pi0_request_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = {NULL};

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstPi0RequestMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
gst_pi0_request_meta_init (GstMeta *meta, gpointer params, GstBuffer *buffer)
{
  GstPi0RequestMeta *m = (GstPi0RequestMeta *)meta;

  m->version = GST_PI0_META_VERSION;
  m->server = NULL;
  m->client_id = 0;
  m->request_id = 0;
  m->prompt = NULL;
  m->seed = 0;
  m->flags = GST_PI0_REQUEST_FLAG_NONE;
  m->received_time = GST_CLOCK_TIME_NONE;
  m->error = NULL;
  return TRUE;
}

static void
gst_pi0_request_meta_free (GstMeta *meta, GstBuffer *buffer)
{
  GstPi0RequestMeta *m = (GstPi0RequestMeta *)meta;

  g_clear_pointer (&m->server, g_free);
  g_clear_pointer (&m->prompt, g_free);
  g_clear_pointer (&m->error, g_free);
}

static gboolean
gst_pi0_request_meta_transform (GstBuffer *dest, GstMeta *meta, GstBuffer *buffer, GQuark type,
                                gpointer data)
{
  GstPi0RequestMeta *src = (GstPi0RequestMeta *)meta;
  GstPi0RequestMeta *dst;

  if (!GST_META_TRANSFORM_IS_COPY (type))
    return FALSE;
  dst = gst_buffer_add_pi0_request_meta (dest, src->server, src->client_id, src->request_id,
                                         src->prompt, src->seed);
  if (!dst)
    return FALSE;
  dst->version = src->version;
  dst->flags = src->flags;
  dst->received_time = src->received_time;
  gst_pi0_request_meta_set_error (dst, src->error);
  return TRUE;
}

const GstMetaInfo *
gst_pi0_request_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **)&info)) {
    gst_pi0_meta_debug_ensure ();
    const GstMetaInfo *mi = gst_meta_register (
        GST_PI0_REQUEST_META_API_TYPE, "GstPi0RequestMeta", sizeof (GstPi0RequestMeta),
        gst_pi0_request_meta_init, gst_pi0_request_meta_free, gst_pi0_request_meta_transform);
    g_once_init_leave ((GstMetaInfo **)&info, (GstMetaInfo *)mi);
  }
  return info;
}

/**
 * gst_pi0_request_flags_get_type:
 *
 * The #GstPi0RequestFlags as a GType, for bindings (nick `client-seed`).
 *
 * Since: 0.4
 */
GType
gst_pi0_request_flags_get_type (void)
{
  static gsize id = 0;
  static const GFlagsValue values[] = {
      {GST_PI0_REQUEST_FLAG_NONE, "GST_PI0_REQUEST_FLAG_NONE", "none"},
      {GST_PI0_REQUEST_FLAG_CLIENT_SEED, "GST_PI0_REQUEST_FLAG_CLIENT_SEED", "client-seed"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_flags_register_static ("GstPi0RequestFlags", values));
  return (GType)id;
}

/**
 * gst_buffer_get_pi0_request_meta:
 * @buffer: a #GstBuffer
 *
 * Returns: (transfer none) (nullable): the request meta of @buffer, valid while @buffer lives
 *   and keeps it, or %NULL.
 *
 * Since: 0.3
 */
GstPi0RequestMeta *
gst_buffer_get_pi0_request_meta (GstBuffer *buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstPi0RequestMeta *)gst_buffer_get_meta (buffer, GST_PI0_REQUEST_META_API_TYPE);
}

/**
 * gst_buffer_add_pi0_request_meta:
 * @buffer: a writable buffer
 * @server: (nullable): the server's name
 * @client_id: the client (connection)
 * @request_id: the request's number on that connection
 * @prompt: (nullable): the request's instruction, UTF-8
 * @seed: the request's noise seed
 *
 * Returns: (transfer none) (nullable): the meta, or %NULL when @prompt is not valid UTF-8.
 *
 * Since: 0.3
 */
GstPi0RequestMeta *
gst_buffer_add_pi0_request_meta (GstBuffer *buffer, const gchar *server, guint64 client_id,
                                 guint64 request_id, const gchar *prompt, guint64 seed)
{
  GstPi0RequestMeta *m;

  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  g_return_val_if_fail (prompt == NULL || g_utf8_validate (prompt, -1, NULL), NULL);

  m = (GstPi0RequestMeta *)gst_buffer_add_meta (buffer, GST_PI0_REQUEST_META_INFO, NULL);
  if (!m)
    return NULL;
  m->server = g_strdup (server ? server : "");
  m->client_id = client_id;
  m->request_id = request_id;
  m->prompt = g_strdup (prompt ? prompt : "");
  m->seed = seed;
  return m;
}

/**
 * gst_pi0_request_meta_set_error:
 * @meta: a request meta
 * @error: (nullable): why the request got no actions (copied; made valid UTF-8), or %NULL
 *
 * Records that the request failed, and why: `pi0servesink` answers its client with this
 * instead of actions.
 *
 * Since: 0.3
 */
void
gst_pi0_request_meta_set_error (GstPi0RequestMeta *meta, const gchar *error)
{
  g_return_if_fail (meta != NULL);
  g_clear_pointer (&meta->error, g_free);
  if (error)
    meta->error = g_utf8_make_valid (error, -1);
}
