/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Media types shared by the elements, the tests and applications. */

/**
 * GST_PI0_OBSERVATION_MEDIA_TYPE:
 *
 * One buffer = one observation: the view frames' memories in view order and a
 * #GstPi0ObservationMeta. Fields: `views` (int, number of views), `view-names` (string,
 * comma-separated, in view order), `base-view` (string), `state-dim` (int, 0 without state),
 * `framerate` (fraction, the base view's); gst_pi0_observation_caps_new() makes them.
 */
#define GST_PI0_OBSERVATION_MEDIA_TYPE "application/x-pi0-observation"

/**
 * GST_PI0_OBSERVATION_CAPS:
 *
 * The caps an element that takes or gives observations in either memory writes in its pad
 * templates: #GST_PI0_OBSERVATION_MEDIA_TYPE in system memory or in `memory:CUDAMemory`.
 *
 * Since: 0.3
 */
#define GST_PI0_OBSERVATION_CAPS                                                                   \
  GST_PI0_OBSERVATION_MEDIA_TYPE "; " GST_PI0_OBSERVATION_MEDIA_TYPE "(memory:CUDAMemory)"

/**
 * GST_PI0_STATE_MEDIA_TYPE:
 *
 * A robot state stream: each buffer holds exactly `dim` native-endian float32 values.
 */
#define GST_PI0_STATE_MEDIA_TYPE "application/x-pi0-state"

/**
 * GST_PI0_MAX_VIEWS:
 *
 * Largest number of views one observation can hold.
 */
#define GST_PI0_MAX_VIEWS 8

/**
 * GST_PI0_VIEW_NAME_LEN:
 *
 * Longest view name, including the terminating NUL.
 */
#define GST_PI0_VIEW_NAME_LEN 16

/**
 * GST_PI0_META_VERSION:
 *
 * Version of the meta structs declared by this library.
 */
#define GST_PI0_META_VERSION 1
