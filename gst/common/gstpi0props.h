/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* How every element of the plugin declares and copies its properties (docs/design.md,
 * "Conventions"):
 *
 *  - `PROP_*` ids, and a Settings struct whose member initialisers are the one source of every
 *    default: class_init makes one (`const Settings d;`) and each param spec reads its default
 *    from it (`g_param_spec_int ("width", ..., 1, 8192, d.width, ...)`), as gst-plugins-rs's
 *    elements take theirs from `Settings::default()`; no DEFAULT_* macros, so the element's
 *    first value, the param spec and gst-inspect cannot disagree (tests/project/
 *    test_plugin_docs.cpp checks them, and the element's page, against each other);
 *  - the param spec flags below, one spelling for each kind of property;
 *  - one table, transfer(), for both directions, called by set_property and get_property under
 *    the private struct's settings_lock (read-only properties such as `stats` are answered
 *    before it, without that lock):
 *
 *   static bool
 *   transfer (Settings &s, guint prop_id, GValue *value, bool set)
 *   {
 *     switch (prop_id) {
 *       GST_PI0_PROP_FIELD (PROP_RATE, rate, gdouble, double)
 *       GST_PI0_PROP_STRING (PROP_MODEL, model)
 *       GST_PI0_PROP_STRING_OR (PROP_TARGET, target)
 *     }
 *     return false;  (an id the table does not know: G_OBJECT_WARN_INVALID_PROPERTY_ID)
 *   }
 *
 * The macros use the names `s`, `value` and `set` of that signature. GST_PI0_PROP_FIELD casts
 * through the field's own type (enums stored as their C enum, counts as their width);
 * GST_PI0_PROP_STRING stores a std::string, NULL as "", and reads "" back as NULL (properties
 * whose default is NULL: the member starts empty and the param spec says nullptr);
 * GST_PI0_PROP_STRING_OR stores NULL as the member's initial value and reads back what is
 * stored (properties with a string default, "" included: the param spec says d.field.c_str ()).
 * Anything else is a hand-written case that ends in `return true`. */

#include <glib-object.h>
#include <gst/gst.h>

#include <type_traits>

/* Read and written in NULL and READY (taken at start). */
#define GST_PI0_PARAM_READY                                                                        \
  ((GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY))
/* Read and written at any time (taken at the next buffer). */
#define GST_PI0_PARAM_PLAYING                                                                      \
  ((GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING))
/* A secret: written in NULL and READY, never read back. */
#define GST_PI0_PARAM_WRITE_ONLY                                                                   \
  ((GParamFlags)(G_PARAM_WRITABLE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY))
/* Set once, when the element is made. */
#define GST_PI0_PARAM_CONSTRUCT_ONLY                                                               \
  ((GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_CONSTRUCT_ONLY))
/* Read only: stats, what the element found out. */
#define GST_PI0_PARAM_READ_ONLY ((GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS))

/* The author of every element (gst_element_class_set_static_metadata). */
#define GST_PI0_AUTHOR "gst-pi0 developers"

#define GST_PI0_PROP_FIELD(ID, field, type, gtype)                                                 \
  case ID:                                                                                         \
    if (set)                                                                                       \
      s.field = (decltype (s.field))g_value_get_##gtype (value);                                   \
    else                                                                                           \
      g_value_set_##gtype (value, (type)s.field);                                                  \
    return true;

#define GST_PI0_PROP_STRING(ID, field)                                                             \
  case ID:                                                                                         \
    if (set)                                                                                       \
      s.field = g_value_get_string (value) ? g_value_get_string (value) : "";                      \
    else                                                                                           \
      g_value_set_string (value, s.field.empty () ? nullptr : s.field.c_str ());                   \
    return true;

#define GST_PI0_PROP_STRING_OR(ID, field)                                                          \
  case ID:                                                                                         \
    if (set)                                                                                       \
      s.field = g_value_get_string (value) ? g_value_get_string (value)                            \
                                           : std::remove_reference_t<decltype (s)> ().field;       \
    else                                                                                           \
      g_value_set_string (value, s.field.c_str ());                                                \
    return true;
