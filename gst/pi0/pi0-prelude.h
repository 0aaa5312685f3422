/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/gst.h>

#ifndef GST_PI0_API
#ifdef BUILDING_GST_PI0
#define GST_PI0_API GST_API_EXPORT
#else
#define GST_PI0_API GST_API_IMPORT
#endif
#endif
