/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Umbrella header of libgstpi0-1.0: the metas that carry an observation through a gst-pi0
 * pipeline. See docs/meta.md. */
#pragma once

#include <gst/pi0/pi0-prelude.h>
#include <gst/pi0/gstpi0caps.h>
#include <gst/pi0/gstpi0error.h>
#include <gst/pi0/gstpi0observationmeta.h>
#include <gst/pi0/gstpi0tensormeta.h>
#include <gst/pi0/gstpi0actionmeta.h>
#include <gst/pi0/gstpi0events.h>
#include <gst/pi0/gstpi0requestmeta.h>
