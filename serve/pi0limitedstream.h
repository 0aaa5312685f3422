/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A GInputStream that refuses more than a budget of bytes: what the policy server reads a
 * connection through, so that the bytes a client may send between two complete messages are
 * bounded (libsoup bounds one frame; a message split into many small fragments is caught here).
 * The server sets the budget again at each message. GObject's reads, skips and pollable reads
 * all go through the count. */

#include <gio/gio.h>

namespace pi0::serve
{

struct LimitedInputStream {
  GFilterInputStream parent;
  gint64 budget; /* bytes it may still read; a read past it fails with MESSAGE_TOO_LARGE */
};

/* A stream over @base (closed with it) that may read @budget bytes. Full reference. */
LimitedInputStream *limited_input_stream_new (GInputStream *base, gint64 budget);

} // namespace pi0::serve
