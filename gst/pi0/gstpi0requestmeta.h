/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>

G_BEGIN_DECLS

/**
 * GstPi0RequestFlags:
 * @GST_PI0_REQUEST_FLAG_NONE: no flag
 * @GST_PI0_REQUEST_FLAG_CLIENT_SEED: the client chose @seed itself (else the server derived it)
 *
 * Since: 0.3
 */
typedef enum {
  GST_PI0_REQUEST_FLAG_NONE = 0,
  GST_PI0_REQUEST_FLAG_CLIENT_SEED = (1 << 0),
} GstPi0RequestFlags;

GST_PI0_API GType gst_pi0_request_flags_get_type (void);
#define GST_TYPE_PI0_REQUEST_FLAGS (gst_pi0_request_flags_get_type ())

typedef struct _GstPi0RequestMeta GstPi0RequestMeta;

/**
 * GstPi0RequestMeta:
 * @meta: parent #GstMeta
 * @version: #GST_PI0_META_VERSION of the library that made the meta
 * @server: name of the server the request came through (owned, never %NULL)
 * @client_id: the connection the request came on; unique for the server's life, from 1
 * @request_id: the request's number on its connection, from 0
 * @prompt: the instruction for this request (owned, UTF-8, never %NULL; may be empty)
 * @seed: the flow-matching noise seed of this request
 * @flags: #GstPi0RequestFlags
 * @received_time: running time at which the request arrived (#GST_CLOCK_TIME_NONE without a
 *   clock)
 * @error: why no actions were made for this request (owned, UTF-8; %NULL when none): set with
 *   gst_pi0_request_meta_set_error() by the element that failed it, sent to the client by
 *   `pi0servesink`. Since: 0.3
 *
 * One observation that a remote client asked about (`pi0servesrc`): who to answer and what
 * that client's request alone says, so that observations from different robots can share a
 * pipeline (and a batch) and still each get their own prompt and noise. `pi0servesink` answers
 * with the buffer's #GstPi0ActionMeta.
 *
 * Since: 0.3
 */
struct _GstPi0RequestMeta {
  GstMeta meta;
  guint version;
  gchar *server;
  guint64 client_id;
  guint64 request_id;
  gchar *prompt;
  guint64 seed;
  GstPi0RequestFlags flags;
  GstClockTime received_time;
  gchar *error;
  /*< private >*/
  gpointer _gst_reserved[GST_PADDING_LARGE - 1];
};

GST_PI0_API GType gst_pi0_request_meta_api_get_type (void);
#define GST_PI0_REQUEST_META_API_TYPE (gst_pi0_request_meta_api_get_type ())

GST_PI0_API const GstMetaInfo *gst_pi0_request_meta_get_info (void);
#define GST_PI0_REQUEST_META_INFO (gst_pi0_request_meta_get_info ())

GST_PI0_API GstPi0RequestMeta *gst_buffer_get_pi0_request_meta (GstBuffer *buffer);

GST_PI0_API GstPi0RequestMeta *
gst_buffer_add_pi0_request_meta (GstBuffer *buffer, const gchar *server, guint64 client_id,
                                 guint64 request_id, const gchar *prompt, guint64 seed);

GST_PI0_API void gst_pi0_request_meta_set_error (GstPi0RequestMeta *meta, const gchar *error);

G_END_DECLS
