/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What an HTTP request must show before it may become a websocket session: the API key,
 * compared in constant time, and an Origin that is the host itself (not a web page of another
 * site). The refusals themselves are pi0serverhttp.cpp's. */

#include <string>

namespace pi0::serve
{

/* Compares in time independent of where the strings differ (and of their lengths: both are
 * hashed first). */
bool same_secret (const std::string &a, const std::string &b);

/* An Origin header that names the host the request was sent to ("http://10.0.0.5:8000" with
 * "Host: 10.0.0.5:8000"): what websocket-client sends by default. A web page of another site
 * sends its own origin, which does not match. */
bool same_origin (const char *origin, const char *host);

} // namespace pi0::serve
