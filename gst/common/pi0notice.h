/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What an engine tells its element to post (docs/design.md, "Engines"). An engine includes no
 * element header and posts nothing: each call takes a settings snapshot and the time, and returns
 * what happened, its bus messages among it, in a Notices. The element posts them with
 * GST_PI0_POST_NOTICES() once it holds no lock, in the order they were made.
 *
 *   pi0::Notices n;
 *   GstFlowReturn ret = engine.step (buf, settings, now, n);
 *   GST_PI0_POST_NOTICES (self, n);
 *
 * An error notice is posted like GST_ELEMENT_ERROR (the engine returns the flow that goes with
 * it); warnings and infos like GST_ELEMENT_WARNING / GST_ELEMENT_INFO, with their details
 * structure when they have one. */

#include <gst/gst.h>

#include <string>
#include <vector>

namespace pi0
{

struct Notice {
  GstMessageType type = GST_MESSAGE_WARNING; /* GST_MESSAGE_ERROR, _WARNING or _INFO */
  GQuark domain = 0;                         /* GST_CORE_ERROR, GST_STREAM_ERROR, ... */
  gint code = 0;                             /* of that domain: GST_STREAM_ERROR_FORMAT, ... */
  std::string text;                          /* for the user */
  std::string debug;                         /* for the developer; may be empty */
  GstStructure *details = nullptr;           /* owned until posted */

  Notice () = default;
  Notice (const Notice &) = delete;
  Notice &operator= (const Notice &) = delete;
  Notice (Notice &&o) noexcept;
  Notice &operator= (Notice &&o) noexcept;
  ~Notice ();
};

class Notices
{
public:
  /* @details is taken (may be nullptr). */
  void error (GQuark domain, gint code, std::string text, std::string debug = std::string (),
              GstStructure *details = nullptr);
  void warning (GQuark domain, gint code, std::string text, std::string debug = std::string (),
                GstStructure *details = nullptr);
  void info (GQuark domain, gint code, std::string text, std::string debug = std::string (),
             GstStructure *details = nullptr);

  bool empty () const { return items_.empty (); }
  size_t size () const { return items_.size (); }
  bool has_error () const;
  const std::vector<Notice> &items () const { return items_; }
  /* The errors become warnings: the element decided that the failure is not the stream's (a
   * served request's own). Returns the first error's text ("" when there was none). */
  std::string demote_errors ();
  /* Appends @other's notices (emptying it). */
  void splice (Notices &other);
  /* Gives the notices away, in order (the element posts them). */
  std::vector<Notice> take ();
  void clear () { items_.clear (); }

private:
  void add (GstMessageType type, GQuark domain, gint code, std::string text, std::string debug,
            GstStructure *details);
  std::vector<Notice> items_;
};

/* printf into a std::string (GLib's formats: GST_TIME_FORMAT, G_GUINT64_FORMAT...), for the
 * wording of notices. */
std::string strf (const char *fmt, ...) G_GNUC_PRINTF (1, 2);

/* Posts every notice of @n on @element's bus, in order, and empties @n. Call it with no lock
 * held. */
void post_notices (GstElement *element, Notices &n, const char *file, const char *function,
                   int line);

} // namespace pi0

#define GST_PI0_POST_NOTICES(element, n)                                                           \
  pi0::post_notices (GST_ELEMENT (element), (n), __FILE__, GST_FUNCTION, __LINE__)
