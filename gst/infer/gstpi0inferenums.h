/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The enums of pi0infer's properties, apart from the element: its header and its runner
 * (pi0inferrunner.h, which includes no element header) both take them from here. Where the
 * policy runs is libgstpi0's #GstPi0Device, as for cudaprep. */

#include <glib-object.h>

G_BEGIN_DECLS

/**
 * GstPi0InferPrecision:
 * @GST_PI0_INFER_PRECISION_AUTO: bf16 weights on CUDA, fp32 on the CPU
 * @GST_PI0_INFER_PRECISION_BF16: bf16 weights (fp32 norms and softmax)
 * @GST_PI0_INFER_PRECISION_FP32: fp32 everywhere
 */
typedef enum {
  GST_PI0_INFER_PRECISION_AUTO = 0,
  GST_PI0_INFER_PRECISION_BF16 = 1,
  GST_PI0_INFER_PRECISION_FP32 = 2,
} GstPi0InferPrecision;

/**
 * GstPi0InferNormMode:
 * @GST_PI0_INFER_NORM_MODE_ZSCORE: (x - mean) / (std + 1e-6), as pi0 trains
 * @GST_PI0_INFER_NORM_MODE_QUANTILE: [q01, q99] to [-1, 1], as pi05 and pi0-FAST train
 */
typedef enum {
  GST_PI0_INFER_NORM_MODE_ZSCORE = 0,
  GST_PI0_INFER_NORM_MODE_QUANTILE = 1,
} GstPi0InferNormMode;

/**
 * GstPi0InferRtc:
 * @GST_PI0_INFER_RTC_OFF: each chunk is sampled from fresh noise alone
 * @GST_PI0_INFER_RTC_GUIDED: real-time chunking: each chunk is guided toward the rest of the
 *   chunk the robot executes (reported by pi0actionsink), docs/rtc.md
 * @GST_PI0_INFER_RTC_GUIDED_IDENTITY: as guided, with J = I in the correction (LeRobot's form:
 *   no backward pass, the cost of plain sampling)
 */
typedef enum {
  GST_PI0_INFER_RTC_OFF = 0,
  GST_PI0_INFER_RTC_GUIDED = 1,
  GST_PI0_INFER_RTC_GUIDED_IDENTITY = 2,
} GstPi0InferRtc;

/**
 * GstPi0InferDiscreteState:
 * @GST_PI0_INFER_DISCRETE_STATE_AUTO: what the checkpoint says; openpi's converter writes
 *   nothing, and then pi0.5's default (bins)
 * @GST_PI0_INFER_DISCRETE_STATE_BINS: the state reaches the model as 256 bins in its prompt
 *   (openpi's discrete_state_input=True: pi05_droid, pi05_base)
 * @GST_PI0_INFER_DISCRETE_STATE_NONE: the model reads no state (discrete_state_input=False:
 *   pi05_libero)
 */
typedef enum {
  GST_PI0_INFER_DISCRETE_STATE_AUTO = 0,
  GST_PI0_INFER_DISCRETE_STATE_BINS = 1,
  GST_PI0_INFER_DISCRETE_STATE_NONE = 2,
} GstPi0InferDiscreteState;

/* Enum types of the element's properties (registered for gst-inspect and bindings). */
#define GST_TYPE_PI0_INFER_PRECISION (gst_pi0_infer_precision_get_type ())
GType gst_pi0_infer_precision_get_type (void);
#define GST_TYPE_PI0_INFER_NORM_MODE (gst_pi0_infer_norm_mode_get_type ())
GType gst_pi0_infer_norm_mode_get_type (void);
#define GST_TYPE_PI0_INFER_RTC (gst_pi0_infer_rtc_get_type ())
GType gst_pi0_infer_rtc_get_type (void);
#define GST_TYPE_PI0_INFER_DISCRETE_STATE (gst_pi0_infer_discrete_state_get_type ())
GType gst_pi0_infer_discrete_state_get_type (void);

G_END_DECLS
