/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The main of every test binary: initialises GStreamer, registers our elements statically
 * (the tests never load libgstpi0.so, which would register the same GTypes twice), and turns
 * every GLib warning or critical into a test failure, as gst_check_init does. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0elements.h"
#include "test_helpers.h"

#include <gst/pi0/pi0.h>

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

namespace pi0test
{

namespace
{
std::mutex expect_lock;
std::vector<std::pair<std::string, int>> expectations;

bool
consume_expected (const gchar *message)
{
  std::lock_guard<std::mutex> lk (expect_lock);
  for (auto &e : expectations) {
    if (message && std::string (message).find (e.first) != std::string::npos) {
      e.second++;
      return true;
    }
  }
  return false;
}

void
log_handler (const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer)
{
  if (level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING)) {
    if (consume_expected (message))
      return;
    ADD_FAILURE () << "unexpected GLib " << ((level & G_LOG_LEVEL_WARNING) ? "warning" : "critical")
                   << " [" << (domain ? domain : "") << "] " << (message ? message : "");
    return;
  }
  g_log_default_handler (domain, level, message, nullptr);
}
} // namespace

ExpectLog::ExpectLog (std::string substring) : substring_ (std::move (substring))
{
  std::lock_guard<std::mutex> lk (expect_lock);
  expectations.emplace_back (substring_, 0);
}

ExpectLog::~ExpectLog ()
{
  std::lock_guard<std::mutex> lk (expect_lock);
  for (auto it = expectations.begin (); it != expectations.end (); ++it) {
    if (it->first == substring_) {
      expectations.erase (it);
      break;
    }
  }
}

int
ExpectLog::count () const
{
  std::lock_guard<std::mutex> lk (expect_lock);
  for (auto &e : expectations) {
    if (e.first == substring_)
      return e.second;
  }
  return 0;
}

MessagePtr
pop_message (GstBus *bus, GstMessageType types)
{
  return MessagePtr (gst_bus_pop_filtered (bus, types));
}

std::string
message_text (GstMessage *msg)
{
  GError *err = nullptr;
  gchar *dbg = nullptr;
  std::string out;

  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
    gst_message_parse_error (msg, &err, &dbg);
  else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING)
    gst_message_parse_warning (msg, &err, &dbg);
  else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_INFO)
    gst_message_parse_info (msg, &err, &dbg);
  if (err)
    out = err->message;
  if (dbg)
    out += std::string (" | ") + dbg;
  g_clear_error (&err);
  g_free (dbg);
  return out;
}

namespace
{
GstPadProbeReturn
count_sink_buffer (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  auto c = static_cast<SinkCounts *> (user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  if (gst_buffer_get_pi0_observation_meta (buf))
    c->observations++;
  if (gst_buffer_get_pi0_action_meta (buf))
    c->actions++;
  return GST_PAD_PROBE_OK;
}
} // namespace

void
watch_sinks (GstElement *pipeline, SinkCounts *counts)
{
  GstIterator *it = gst_bin_iterate_sinks (GST_BIN (pipeline));
  GValue v = G_VALUE_INIT;
  while (gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
    GstElement *sink = GST_ELEMENT (g_value_get_object (&v));
    if (g_object_class_find_property (G_OBJECT_GET_CLASS (sink), "silent"))
      g_object_set (sink, "silent", TRUE, nullptr);
    for (GList *l = sink->sinkpads; l; l = l->next)
      gst_pad_add_probe (GST_PAD (l->data), GST_PAD_PROBE_TYPE_BUFFER, count_sink_buffer, counts,
                         nullptr);
    g_value_reset (&v);
  }
  g_value_unset (&v);
  gst_iterator_free (it);
}

} // namespace pi0test

int
main (int argc, char **argv)
{
  ::testing::InitGoogleTest (&argc, argv);
  gst_init (&argc, &argv);

  g_log_set_default_handler (pi0test::log_handler, nullptr);
  for (const char *domain :
       {"GStreamer", "GLib", "GLib-GObject", "GStreamer-Pi0", "GStreamer-Check"})
    g_log_set_handler (domain,
                       (GLogLevelFlags)(G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION),
                       pi0test::log_handler, nullptr);

  /* One registration route: an installed libgstpi0.so would clash with the static one. */
  GstPlugin *installed = gst_registry_find_plugin (gst_registry_get (), "pi0");
  if (installed) {
    g_printerr ("a 'pi0' plugin is on the plugin path (%s); the tests register their own copy\n",
                gst_plugin_get_filename (installed));
    gst_object_unref (installed);
    return 1;
  }
  if (!gst_pi0_elements_register (nullptr)) {
    g_printerr ("registering the elements failed\n");
    return 1;
  }
  return RUN_ALL_TESTS ();
}
