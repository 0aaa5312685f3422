/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The one way an element copies a property between a GValue and its settings struct, in both
 * directions from one table (set_property and get_property call the same function):
 *
 *   static void
 *   transfer (Settings &s, guint prop_id, GValue *value, bool set)
 *   {
 *     switch (prop_id) {
 *       GST_PI0_PROP_FIELD (PROP_RATE, rate, gdouble, double)
 *       GST_PI0_PROP_STRING (PROP_MODEL, model, true)
 *     }
 *   }
 *
 * The macros use the names `s`, `value` and `set` of that signature. GST_PI0_PROP_FIELD casts
 * through the field's own type (enums stored as their C enum, counts as their width);
 * GST_PI0_PROP_STRING stores a std::string, NULL as "", and reads back NULL for "" when
 * @null_when_empty. */

#include <glib-object.h>

#define GST_PI0_PROP_FIELD(ID, field, type, gtype)                                                 \
  case ID:                                                                                         \
    if (set)                                                                                       \
      s.field = (decltype (s.field))g_value_get_##gtype (value);                                   \
    else                                                                                           \
      g_value_set_##gtype (value, (type)s.field);                                                  \
    break;

#define GST_PI0_PROP_STRING(ID, field, null_when_empty)                                            \
  case ID:                                                                                         \
    if (set)                                                                                       \
      s.field = g_value_get_string (value) ? g_value_get_string (value) : "";                      \
    else                                                                                           \
      g_value_set_string (value,                                                                   \
                          (null_when_empty) && s.field.empty () ? nullptr : s.field.c_str ());     \
    break;
