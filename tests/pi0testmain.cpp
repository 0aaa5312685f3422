/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The main of every test binary: turns every GLib warning or critical into a test failure, as
 * gst_check_init does (pi0testlog.h says how a test expects one). Built twice: for the element
 * tests (PI0_TEST_ELEMENTS) it also initialises GStreamer and registers our elements statically
 * (the tests never load libgstpi0.so, which would register the same GTypes twice); for the
 * library tests it is only that, with no GStreamer to link. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/pi0testlog.h"

#ifdef PI0_TEST_ELEMENTS
#include "gst/gstpi0elements.h"
#include <gst/gst.h>
#endif

#include <glib.h>
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

} // namespace pi0test

int
main (int argc, char **argv)
{
  ::testing::InitGoogleTest (&argc, argv);
#ifdef PI0_TEST_ELEMENTS
  gst_init (&argc, &argv);
#endif

  g_log_set_default_handler (pi0test::log_handler, nullptr);
  for (const char *domain :
       {"GStreamer", "GLib", "GLib-GObject", "GStreamer-Pi0", "GStreamer-Check"})
    g_log_set_handler (domain,
                       (GLogLevelFlags)(G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION),
                       pi0test::log_handler, nullptr);

#ifdef PI0_TEST_ELEMENTS
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
#endif
  return RUN_ALL_TESTS ();
}
