/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The HMAC key file of pi0-robotsim's and pi0-sim robot's --key-file. Header-only: two
 * programs use it. */
#pragma once

#include "common/pi0file.h"

#include <string>

namespace pi0::tools
{

/* The key in @path: the file's whole content (a regular file of at most 64 KiB, never a FIFO
 * that would block), never empty (an empty key would turn authentication off without a
 * word). "" with *@key set, or why not, naming the file. */
inline std::string
read_hmac_key_file (const std::string &path, std::string *key)
{
  std::string text, why;
  if (!pi0::read_regular_file (path, 64 * 1024, &text, &why))
    return "cannot read the key file " + why;
  if (text.empty ())
    return "the key file " + path + " is empty: an empty key would turn authentication off";
  *key = text;
  return "";
}

} // namespace pi0::tools
