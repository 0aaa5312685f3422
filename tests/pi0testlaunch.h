/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Launch lines as a user runs them, for the tests that run pipelines/ (test_pipelines,
 * test_serve): a line expanded by bash exactly as `eval gst-launch-1.0 "$line"` would
 * (variables, quotes, arithmetic), parsed with gst_parse_launchv() as gst-launch-1.0 does, and
 * the elements of the pipeline found by factory. Needs gio (the bash subprocess). Lines run in
 * the source tree (source_root(), tests/pi0testenv.h). */

#include "tests/pi0testenv.h"
#include "tools/common/pi0launchline.h"

#include <gio/gio.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace pi0test
{

/* Variables a line refers to ($ROBOT_PORT...), set in bash's environment. */
using LineVars = std::map<std::string, std::string>;

/* pipelines/@name.txt as one line without its comments (pi0::tools::read_launch_line, as
 * pipelines/run.sh reads it); "" when it cannot be read. */
inline std::string
pipeline_line (const std::string &name)
{
  std::string line, error;
  if (!pi0::tools::read_launch_line (source_root () + "/pipelines/" + name + ".txt", &line, &error))
    return "";
  return line;
}

/* argv as bash gives it to gst-launch-1.0 after `eval gst-launch-1.0 "$line"`, with @vars in the
 * environment and the source tree as the working directory. Empty, with @error set (bash's
 * stderr), when bash fails. */
inline std::vector<std::string>
expand_line (const std::string &line, const LineVars &vars, std::string *error)
{
  gchar **env = g_get_environ ();
  for (auto &kv : vars)
    env = g_environ_setenv (env, kv.first.c_str (), kv.second.c_str (), TRUE);
  env = g_environ_setenv (env, "PI0_LINE", line.c_str (), TRUE);
  /* NUL-separated, so that no word is split or joined on the way back. */
  const gchar *argv[] = {"bash", "-c", "eval \"set -- $PI0_LINE\" && printf '%s\\0' \"$@\"",
                         nullptr};
  std::vector<std::string> args;
  GError *gerr = nullptr;
  GSubprocessLauncher *l = g_subprocess_launcher_new (
      (GSubprocessFlags)(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE));
  g_subprocess_launcher_set_environ (l, env);
  g_subprocess_launcher_set_cwd (l, source_root ().c_str ());
  GSubprocess *proc = g_subprocess_launcher_spawnv (l, argv, &gerr);
  g_object_unref (l);
  g_strfreev (env);
  if (!proc) {
    *error = gerr->message;
    g_clear_error (&gerr);
    return args;
  }
  GBytes *bout = nullptr, *berr = nullptr;
  g_subprocess_communicate (proc, nullptr, nullptr, &bout, &berr, nullptr);
  const gint status = g_subprocess_get_exit_status (proc);
  g_object_unref (proc);
  gsize len = 0, elen = 0;
  const gchar *out = (const gchar *)g_bytes_get_data (bout, &len);
  const gchar *err = (const gchar *)g_bytes_get_data (berr, &elen);
  if (status != 0) {
    *error = "bash cannot expand the line: " + std::string (err ? err : "", elen);
  } else {
    for (gsize i = 0; i < len;) {
      std::string a (out + i);
      i += a.size () + 1;
      args.push_back (a);
    }
  }
  g_bytes_unref (bout);
  g_bytes_unref (berr);
  return args;
}

/* Parses @args like gst-launch-1.0. Returns nullptr with *err set on failure. */
inline GstElement *
launch (const std::vector<std::string> &args, GError **err)
{
  std::vector<const gchar *> argv;
  for (auto &a : args)
    argv.push_back (a.c_str ());
  argv.push_back (nullptr);
  return gst_parse_launchv (argv.data (), err);
}

/* @line expanded by bash and parsed; nullptr (and a test failure) if either fails. */
inline GstElement *
launch_line (const std::string &line, const LineVars &vars)
{
  std::string xerr;
  auto args = expand_line (line, vars, &xerr);
  if (!xerr.empty () || args.empty ()) {
    ADD_FAILURE () << "cannot expand: " << xerr;
    return nullptr;
  }
  GError *err = nullptr;
  GstElement *e = launch (args, &err);
  if (err) {
    ADD_FAILURE () << "cannot parse: " << err->message;
    g_clear_error (&err);
    if (e)
      gst_object_unref (e);
    return nullptr;
  }
  return e;
}

/* The first element in @bin (recursively) made by @factory, with a new reference; nullptr when
 * there is none. */
inline GstElement *
find_factory (GstElement *bin, const char *factory)
{
  GstIterator *it = gst_bin_iterate_recurse (GST_BIN (bin));
  GValue v = G_VALUE_INIT;
  GstElement *found = nullptr;
  while (!found && gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
    GstElement *e = GST_ELEMENT (g_value_get_object (&v));
    GstElementFactory *f = gst_element_get_factory (e);
    if (f && g_str_equal (GST_OBJECT_NAME (f), factory))
      found = GST_ELEMENT (gst_object_ref (e));
    g_value_reset (&v);
  }
  g_value_unset (&v);
  gst_iterator_free (it);
  return found;
}

} // namespace pi0test
