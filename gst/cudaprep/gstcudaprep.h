/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>

G_BEGIN_DECLS

/**
 * GstPi0CudaPrepResize:
 * @GST_PI0_CUDA_PREP_RESIZE_PAD: openpi's resize-with-pad: keep the aspect ratio, centre,
 *   black padding (floor on top/left)
 * @GST_PI0_CUDA_PREP_RESIZE_STRETCH: scale each axis to the output size
 * @GST_PI0_CUDA_PREP_RESIZE_CROP: keep the aspect ratio, fill the output, cut the centre
 */
typedef enum {
  GST_PI0_CUDA_PREP_RESIZE_PAD = 0,
  GST_PI0_CUDA_PREP_RESIZE_STRETCH = 1,
  GST_PI0_CUDA_PREP_RESIZE_CROP = 2,
} GstPi0CudaPrepResize;

/**
 * GstPi0CudaPrepFilter:
 * @GST_PI0_CUDA_PREP_FILTER_ANTIALIAS: PIL's bilinear filter (antialiased when downscaling), as
 *   openpi trains and infers with, computed vertical pass first (fast): within one uint8 level
 *   of openpi's resize_with_pad
 * @GST_PI0_CUDA_PREP_FILTER_BILINEAR: torch.nn.functional.interpolate(mode='bilinear',
 *   align_corners=False, antialias=False), as LeRobot's pi0 does
 * @GST_PI0_CUDA_PREP_FILTER_PIL: PIL's bilinear resize in its own pass order and fixed point:
 *   bit-identical to openpi's resize_with_pad on landscape frames, slower on the CPU
 */
typedef enum {
  GST_PI0_CUDA_PREP_FILTER_ANTIALIAS = 0,
  GST_PI0_CUDA_PREP_FILTER_BILINEAR = 1,
  GST_PI0_CUDA_PREP_FILTER_PIL = 2,
} GstPi0CudaPrepFilter;

/**
 * GstPi0CudaPrepNormalize:
 * @GST_PI0_CUDA_PREP_NORMALIZE_PI0: x / 255 * 2 - 1 in float32, as openpi (range [-1, 1])
 * @GST_PI0_CUDA_PREP_NORMALIZE_IMAGENET: (x / 255 - mean) / std with ImageNet's mean and std
 * @GST_PI0_CUDA_PREP_NORMALIZE_CUSTOM: (x / 255 - mean) / std with the `mean` and `std`
 *   properties
 */
typedef enum {
  GST_PI0_CUDA_PREP_NORMALIZE_PI0 = 0,
  GST_PI0_CUDA_PREP_NORMALIZE_IMAGENET = 1,
  GST_PI0_CUDA_PREP_NORMALIZE_CUSTOM = 2,
} GstPi0CudaPrepNormalize;

#define GST_TYPE_PI0_CUDA_PREP (gst_pi0_cuda_prep_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0CudaPrep, gst_pi0_cuda_prep, GST, PI0_CUDA_PREP, GstBaseTransform)

GType gst_pi0_cuda_prep_resize_get_type (void);
GType gst_pi0_cuda_prep_filter_get_type (void);
GType gst_pi0_cuda_prep_normalize_get_type (void);

GST_ELEMENT_REGISTER_DECLARE (cudaprep);

G_END_DECLS
