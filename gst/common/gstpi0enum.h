/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The one way this plugin registers the enum GTypes of its properties.
 *
 *   GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_foo_mode_get_type, "GstPi0FooMode",
 *       {FOO_A, "What A does (shown by gst-inspect)", "a"},
 *       {FOO_B, "What B does", "b"})
 *
 * defines `GType gst_pi0_foo_mode_get_type (void)`, declared in the element's header. The
 * value name is the sentence gst-inspect prints, the nick is what a launch line writes.
 * g_once: the first caller may be any thread (a property set from an application thread,
 * gst-inspect, the streaming thread). */

#include <glib-object.h>

#define GST_PI0_DEFINE_ENUM_TYPE(fn, type_name, ...)                                               \
  GType fn (void)                                                                                  \
  {                                                                                                \
    static gsize id = 0;                                                                           \
    static const GEnumValue values[] = {__VA_ARGS__, {0, NULL, NULL}};                             \
    if (g_once_init_enter (&id))                                                                   \
      g_once_init_leave (&id, g_enum_register_static (type_name, values));                         \
    return (GType)id;                                                                              \
  }
