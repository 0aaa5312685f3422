/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the policy server tests share: running tests/serve/openpi_clients.py (openpi-client, the
 * real one, from .venv: venv_python(), tests/pi0testenv.h) against a server, and counting this
 * process's open file descriptors. */

#include "tests/pi0testenv.h"

#include <glib.h>

#include <string>
#include <vector>

namespace pi0test
{

/* True when the venv's Python imports openpi_client. */
inline bool
have_openpi_client ()
{
  const std::string py = venv_python ();
  if (py.empty ())
    return false;
  const gchar *argv[] = {py.c_str (), "-c", "import openpi_client, websockets, msgpack", nullptr};
  gint status = 1;
  if (!g_spawn_sync (nullptr, (gchar **)argv, nullptr, G_SPAWN_STDOUT_TO_DEV_NULL, nullptr,
                     nullptr, nullptr, nullptr, &status, nullptr))
    return false;
  return g_spawn_check_wait_status (status, nullptr);
}

struct ClientRun {
  bool ok = false;
  std::string out; /* stdout and stderr */
};

/* Runs `SCRIPT CASE --port PORT ARGS...` (a client script in tests/serve/); ok when it exits 0. */
inline ClientRun
run_script (const std::string &script, const std::string &case_name, int port,
            const std::vector<std::string> &args)
{
  std::vector<std::string> argv = {venv_python (), source_root () + "/tests/serve/" + script,
                                   case_name, "--port", std::to_string (port)};
  argv.insert (argv.end (), args.begin (), args.end ());
  std::vector<gchar *> cargv;
  for (auto &a : argv)
    cargv.push_back ((gchar *)a.c_str ());
  cargv.push_back (nullptr);
  gchar *out = nullptr, *err = nullptr;
  gint status = 1;
  GError *gerr = nullptr;
  ClientRun r;
  if (!g_spawn_sync (nullptr, cargv.data (), nullptr, G_SPAWN_DEFAULT, nullptr, nullptr, &out,
                     &err, &status, &gerr)) {
    r.out = gerr ? gerr->message : "spawn failed";
    g_clear_error (&gerr);
    return r;
  }
  r.ok = g_spawn_check_wait_status (status, nullptr);
  r.out = std::string (out ? out : "") + (err && *err ? std::string ("\n[stderr]\n") + err : "");
  g_free (out);
  g_free (err);
  return r;
}

/* openpi_clients.py: the robots that openpi-client makes. */
inline ClientRun
run_clients (const std::string &case_name, int port, const std::vector<std::string> &args)
{
  return run_script ("openpi_clients.py", case_name, port, args);
}

/* fleet_clients.py: what fleets do to a server (compression, pipelining, lock-out, hangs). */
inline ClientRun
run_fleet (const std::string &case_name, int port, const std::vector<std::string> &args)
{
  return run_script ("fleet_clients.py", case_name, port, args);
}

/* Open file descriptors of this process. */
inline int
open_fds ()
{
  int n = 0;
  GDir *d = g_dir_open ("/proc/self/fd", 0, nullptr);
  if (!d)
    return -1;
  while (g_dir_read_name (d))
    n++;
  g_dir_close (d);
  return n - 1; /* the directory's own */
}

} // namespace pi0test
