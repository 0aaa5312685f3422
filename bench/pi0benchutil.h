/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the chain benchmarks (e2e, rtc-chain) share: the command line and GStreamer set up the
 * same way, the gst-pi0 elements registered statically (never an installed plugin), an element's
 * `stats` field, and the synthetic live cameras they feed pi0viewmux with. */

#include "gst/gstpi0elements.h"

#include "common/pi0views.h"

#include <gst/gst.h>

#include <string>
#include <type_traits>

namespace pi0::bench
{

/* Parses @entries and GStreamer's own options, initializes GStreamer and registers the gst-pi0
 * elements. Returns -1 to go on, or the exit status after printing why: 2 for bad usage, 1 when
 * the elements cannot be registered. */
inline int
init (int *argc, char ***argv, const char *summary, const GOptionEntry *entries)
{
  GOptionContext *ctx = g_option_context_new (summary);
  g_option_context_add_main_entries (ctx, entries, nullptr);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  GError *err = nullptr;
  const bool parsed = g_option_context_parse (ctx, argc, argv, &err);
  g_option_context_free (ctx);
  if (!parsed) {
    g_printerr ("%s\n", err->message);
    g_error_free (err);
    return 2;
  }
  gst_init (argc, argv);
  if (!gst_pi0_elements_register (nullptr)) {
    g_printerr ("could not register the gst-pi0 elements\n");
    return 1;
  }
  return -1;
}

/* One field of an element's `stats` structure: guint64 or double (0 when absent). */
template <typename T>
T
stat (GstElement *e, const char *field)
{
  static_assert (std::is_same<T, double>::value || std::is_same<T, guint64>::value,
                 "stats fields are guint64 or double");
  GstStructure *s = nullptr;
  g_object_get (e, "stats", &s, nullptr);
  T out = 0;
  if (s) {
    gst_structure_get (s, field, std::is_same<T, double>::value ? G_TYPE_DOUBLE : G_TYPE_UINT64,
                       &out, nullptr);
    gst_structure_free (s);
  }
  return out;
}

/* Three live test cameras (different patterns), each with @caps (a video/x-raw caps string)
 * through a leaky two-buffer queue into mux.main, mux.side and mux.top: a launch-line fragment. */
inline std::string
live_cameras (const std::string &caps)
{
  const char *patterns[3] = {"smpte", "ball", "pinwheel"};
  std::string desc;
  for (int v = 0; v < 3; v++)
    desc += std::string ("videotestsrc is-live=true pattern=") + patterns[v] + " ! " + caps +
            " ! queue max-size-buffers=2 leaky=downstream ! mux." + pi0::kViewNames[v] + " ";
  return desc;
}

} // namespace pi0::bench
