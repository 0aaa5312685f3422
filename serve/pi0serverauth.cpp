/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The API key and Origin checks (see pi0serverauth.h). */
#include "serve/pi0serverauth.h"

#include <glib.h>

#include <cstring>

namespace pi0::serve
{

bool
same_secret (const std::string &a, const std::string &b)
{
  guint8 da[32], db[32];
  gsize la = sizeof da, lb = sizeof db;
  GChecksum *ca = g_checksum_new (G_CHECKSUM_SHA256), *cb = g_checksum_new (G_CHECKSUM_SHA256);
  g_checksum_update (ca, (const guchar *)a.data (), (gssize)a.size ());
  g_checksum_update (cb, (const guchar *)b.data (), (gssize)b.size ());
  g_checksum_get_digest (ca, da, &la);
  g_checksum_get_digest (cb, db, &lb);
  g_checksum_free (ca);
  g_checksum_free (cb);
  volatile guint8 diff = 0;
  for (gsize i = 0; i < sizeof da; i++)
    diff |= da[i] ^ db[i];
  return diff == 0;
}

bool
same_origin (const char *origin, const char *host)
{
  if (!host || !*host)
    return false;
  std::string o = origin;
  for (const char *scheme : {"http://", "https://", "ws://", "wss://"})
    if (o.rfind (scheme, 0) == 0) {
      o = o.substr (strlen (scheme));
      if (!o.empty () && o.back () == '/')
        o.pop_back ();
      return g_ascii_strcasecmp (o.c_str (), host) == 0;
    }
  return false;
}

} // namespace pi0::serve
