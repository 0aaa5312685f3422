/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/common/pi0notice.h"

#include <algorithm>
#include <cstdarg>
#include <iterator>

namespace pi0
{

Notice::Notice (Notice &&o) noexcept
    : type (o.type), domain (o.domain), code (o.code), text (std::move (o.text)),
      debug (std::move (o.debug)), details (o.details)
{
  o.details = nullptr;
}

Notice &
Notice::operator= (Notice &&o) noexcept
{
  if (this != &o) {
    if (details)
      gst_structure_free (details);
    type = o.type;
    domain = o.domain;
    code = o.code;
    text = std::move (o.text);
    debug = std::move (o.debug);
    details = o.details;
    o.details = nullptr;
  }
  return *this;
}

Notice::~Notice ()
{
  if (details)
    gst_structure_free (details);
}

void
Notices::add (GstMessageType type, GQuark domain, gint code, std::string text, std::string debug,
              GstStructure *details)
{
  Notice n;
  n.type = type;
  n.domain = domain;
  n.code = code;
  n.text = std::move (text);
  n.debug = std::move (debug);
  n.details = details;
  items_.push_back (std::move (n));
}

void
Notices::error (GQuark domain, gint code, std::string text, std::string debug,
                GstStructure *details)
{
  add (GST_MESSAGE_ERROR, domain, code, std::move (text), std::move (debug), details);
}

void
Notices::warning (GQuark domain, gint code, std::string text, std::string debug,
                  GstStructure *details)
{
  add (GST_MESSAGE_WARNING, domain, code, std::move (text), std::move (debug), details);
}

void
Notices::info (GQuark domain, gint code, std::string text, std::string debug,
               GstStructure *details)
{
  add (GST_MESSAGE_INFO, domain, code, std::move (text), std::move (debug), details);
}

bool
Notices::has_error () const
{
  return std::any_of (items_.begin (), items_.end (),
                      [] (const Notice &n) { return n.type == GST_MESSAGE_ERROR; });
}

std::string
Notices::demote_errors ()
{
  std::string first;
  for (Notice &x : items_) {
    if (x.type != GST_MESSAGE_ERROR)
      continue;
    if (first.empty ())
      first = x.text;
    x.type = GST_MESSAGE_WARNING;
  }
  return first;
}

void
Notices::splice (Notices &other)
{
  std::move (other.items_.begin (), other.items_.end (), std::back_inserter (items_));
  other.items_.clear ();
}

std::vector<Notice>
Notices::take ()
{
  std::vector<Notice> out;
  out.swap (items_);
  return out;
}

std::string
strf (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  gchar *c = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  std::string out (c);
  g_free (c);
  return out;
}

void
post_notices (GstElement *element, Notices &n, const char *file, const char *function, int line)
{
  for (Notice &x : n.take ()) {
    /* What GST_ELEMENT_ERROR and its siblings do, with the engine's words. */
    if (x.type == GST_MESSAGE_ERROR)
      GST_WARNING_OBJECT (element, "error: %s (%s)", x.text.c_str (), x.debug.c_str ());
    gst_element_message_full_with_details (
        element, x.type, x.domain, x.code, g_strdup (x.text.c_str ()),
        x.debug.empty () ? nullptr : g_strdup (x.debug.c_str ()), file, function, line,
        x.details);
    x.details = nullptr; /* taken by the message */
  }
}

} // namespace pi0
