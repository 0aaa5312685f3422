/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The byte-budgeted input stream (see pi0limitedstream.h): a GFilterInputStream whose reads,
 * blocking and pollable, are counted against the budget. */
#include "serve/pi0limitedstream.h"

namespace pi0::serve
{

namespace
{

struct LimitedInputStreamClass {
  GFilterInputStreamClass parent_class;
};

GType limited_input_stream_get_type (void);
void limited_input_stream_pollable_init (GPollableInputStreamInterface *iface);

G_DEFINE_TYPE_WITH_CODE (LimitedInputStream, limited_input_stream, G_TYPE_FILTER_INPUT_STREAM,
                         G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_INPUT_STREAM,
                                                limited_input_stream_pollable_init))

#define LIMITED_INPUT_STREAM(o)                                                                    \
  (G_TYPE_CHECK_INSTANCE_CAST ((o), limited_input_stream_get_type (), LimitedInputStream))

GInputStream *
base_of (gpointer stream)
{
  return g_filter_input_stream_get_base_stream (G_FILTER_INPUT_STREAM (stream));
}

gssize
limited_account (gpointer stream, gssize n, GError **error)
{
  LimitedInputStream *s = LIMITED_INPUT_STREAM (stream);
  if (n <= 0)
    return n;
  if (n > s->budget) {
    s->budget = 0;
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                         "the client sent more than the message-size limit allows");
    return -1;
  }
  s->budget -= n;
  return n;
}

gssize
limited_read (GInputStream *stream, void *buffer, gsize count, GCancellable *cancellable,
              GError **error)
{
  gssize n = g_input_stream_read (base_of (stream), buffer, count, cancellable, error);
  return limited_account (stream, n, error);
}

gboolean
limited_can_poll (GPollableInputStream *stream)
{
  GInputStream *b = base_of (stream);
  return G_IS_POLLABLE_INPUT_STREAM (b) &&
         g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (b));
}

gboolean
limited_is_readable (GPollableInputStream *stream)
{
  return g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM (base_of (stream)));
}

GSource *
limited_create_source (GPollableInputStream *stream, GCancellable *cancellable)
{
  GSource *base =
      g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM (base_of (stream)), nullptr);
  GSource *src = g_pollable_source_new_full (stream, base, cancellable);
  g_source_unref (base);
  return src;
}

gssize
limited_read_nonblocking (GPollableInputStream *stream, void *buffer, gsize count, GError **error)
{
  gssize n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (base_of (stream)),
                                                       buffer, count, nullptr, error);
  return limited_account (stream, n, error);
}

void
limited_input_stream_pollable_init (GPollableInputStreamInterface *iface)
{
  iface->can_poll = limited_can_poll;
  iface->is_readable = limited_is_readable;
  iface->create_source = limited_create_source;
  iface->read_nonblocking = limited_read_nonblocking;
}

void
limited_input_stream_class_init (LimitedInputStreamClass *klass)
{
  GInputStreamClass *ic = G_INPUT_STREAM_CLASS (klass);
  ic->read_fn = limited_read;
  /* GFilterInputStream's skip would bypass the count: GInputStream's reads through read_fn. */
  ic->skip = G_INPUT_STREAM_CLASS (g_type_class_peek (G_TYPE_INPUT_STREAM))->skip;
}

void
limited_input_stream_init (LimitedInputStream *self)
{
  self->budget = 0;
}

} // namespace

LimitedInputStream *
limited_input_stream_new (GInputStream *base, gint64 budget)
{
  auto *s = LIMITED_INPUT_STREAM (g_object_new (limited_input_stream_get_type (), "base-stream",
                                                base, "close-base-stream", TRUE, nullptr));
  s->budget = budget;
  return s;
}

} // namespace pi0::serve
