/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Every test binary's main (pi0testmain.cpp) turns GLib warnings and criticals into failures,
 * as gst_check_init does; a test that expects one says so with an ExpectLog. No GStreamer. */

#include <string>

namespace pi0test
{

/* While alive, GLib warnings/criticals whose message contains @substring are expected: they
 * are counted instead of failing the test. */
class ExpectLog
{
public:
  explicit ExpectLog (std::string substring);
  ~ExpectLog ();
  int count () const;

private:
  std::string substring_;
};

} // namespace pi0test
