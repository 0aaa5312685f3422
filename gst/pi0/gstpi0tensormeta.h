/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>
#include <gst/pi0/gstpi0caps.h>
#include <gst/pi0/gstpi0error.h>

G_BEGIN_DECLS

/**
 * GstPi0DType:
 * @GST_PI0_DTYPE_FLOAT32: IEEE float32
 * @GST_PI0_DTYPE_FLOAT16: IEEE float16
 * @GST_PI0_DTYPE_BFLOAT16: bfloat16
 * @GST_PI0_DTYPE_UINT8: unsigned 8-bit
 */
typedef enum {
  GST_PI0_DTYPE_FLOAT32 = 0,
  GST_PI0_DTYPE_FLOAT16 = 1,
  GST_PI0_DTYPE_BFLOAT16 = 2,
  GST_PI0_DTYPE_UINT8 = 3,
} GstPi0DType;

GST_PI0_API GType gst_pi0_dtype_get_type (void);
#define GST_TYPE_PI0_DTYPE (gst_pi0_dtype_get_type ())

/**
 * GstPi0Device:
 * @GST_PI0_DEVICE_CPU: the CPU: host memory
 * @GST_PI0_DEVICE_CUDA: a CUDA device: device memory (in the device's primary context)
 * @GST_PI0_DEVICE_AUTO: an element's choice, never a meta's: CUDA when a device is usable,
 *   otherwise the CPU (Since: 0.3)
 *
 * Where a tensor lives, and (the elements' `device` property) where an element works.
 */
typedef enum {
  GST_PI0_DEVICE_CPU = 0,
  GST_PI0_DEVICE_CUDA = 1,
  GST_PI0_DEVICE_AUTO = 2,
} GstPi0Device;

GST_PI0_API GType gst_pi0_device_get_type (void);
#define GST_TYPE_PI0_DEVICE (gst_pi0_device_get_type ())

#define GST_PI0_TENSOR_MAX_DIMS 8

/**
 * GstPi0TensorStorage:
 *
 * A reference-counted block of tensor memory (host or device). The creator passes a destroy
 * function that gives the block back (to a pool, cudaFree, g_free, ...) when the last
 * reference goes. Copies of a #GstPi0TensorMeta share one storage: the data is read-only once
 * the meta is on a buffer.
 */
typedef struct _GstPi0TensorStorage GstPi0TensorStorage;

GST_PI0_API GType gst_pi0_tensor_storage_get_type (void);
#define GST_TYPE_PI0_TENSOR_STORAGE (gst_pi0_tensor_storage_get_type ())

GST_PI0_API GstPi0TensorStorage *gst_pi0_tensor_storage_new (gpointer data, gsize nbytes,
                                                             GstPi0Device device, gint device_id,
                                                             gpointer user_data,
                                                             GDestroyNotify notify);
GST_PI0_API GstPi0TensorStorage *gst_pi0_tensor_storage_new_host (gsize nbytes);
GST_PI0_API GstPi0TensorStorage *gst_pi0_tensor_storage_ref (GstPi0TensorStorage *storage);
GST_PI0_API void gst_pi0_tensor_storage_unref (GstPi0TensorStorage *storage);
GST_PI0_API gpointer gst_pi0_tensor_storage_get_data (const GstPi0TensorStorage *storage);
GST_PI0_API gsize gst_pi0_tensor_storage_get_size (const GstPi0TensorStorage *storage);
GST_PI0_API GstPi0Device gst_pi0_tensor_storage_get_device (const GstPi0TensorStorage *storage,
                                                            gint *device_id);

typedef struct _GstPi0TensorMeta GstPi0TensorMeta;

/**
 * GstPi0TensorMeta:
 * @meta: parent #GstMeta
 * @version: #GST_PI0_META_VERSION of the library that made the meta
 * @dtype: element type
 * @device: where @data lives
 * @device_id: CUDA device ordinal (0 for the CPU)
 * @n_dims: number of entries in @shape
 * @shape: dimensions, outermost first; the model input is `[V, 3, H, W]`, contiguous; bindings
 *   read the @n_dims used with gst_pi0_tensor_meta_get_shape()
 * @data: first element, in @storage; read-only; bindings read host data with
 *   gst_pi0_tensor_meta_get_data_buffer()
 * @storage: owns @data (one reference held by the meta)
 * @n_masks: number of entries in @image_masks (the number of views)
 * @image_masks: %TRUE where a view holds a real image, %FALSE where it is masked; bindings read
 *   the @n_masks used with gst_pi0_tensor_meta_get_masks()
 * @ready_event: a `cudaEvent_t` recorded when @data is written, or %NULL (host data, or data
 *   already complete). A consumer on another stream calls `cudaStreamWaitEvent` on it before
 *   reading @data; it stays valid while @storage lives.
 * @prepared_time: running time at which the producer pushed the buffer (#GST_CLOCK_TIME_NONE
 *   without a clock). GPU work may still be in flight then (see @ready_event). Since: 0.2
 *
 * The model input computed from an observation (by `cudaprep`).
 */
struct _GstPi0TensorMeta {
  GstMeta meta;
  guint version;
  GstPi0DType dtype;
  GstPi0Device device;
  gint device_id;
  guint n_dims;
  gint64 shape[GST_PI0_TENSOR_MAX_DIMS];
  gpointer data;
  GstPi0TensorStorage *storage;
  guint n_masks;
  gboolean image_masks[GST_PI0_MAX_VIEWS];
  gpointer ready_event;
  GstClockTime prepared_time;
  /*< private >*/
  gpointer _gst_reserved[GST_PADDING_LARGE];
};

GST_PI0_API GType gst_pi0_tensor_meta_api_get_type (void);
#define GST_PI0_TENSOR_META_API_TYPE (gst_pi0_tensor_meta_api_get_type ())

GST_PI0_API const GstMetaInfo *gst_pi0_tensor_meta_get_info (void);
#define GST_PI0_TENSOR_META_INFO (gst_pi0_tensor_meta_get_info ())

GST_PI0_API GstPi0TensorMeta *gst_buffer_get_pi0_tensor_meta (GstBuffer *buffer);

GST_PI0_API GstPi0TensorMeta *gst_buffer_add_pi0_tensor_meta (GstBuffer *buffer,
                                                              GstPi0TensorStorage *storage,
                                                              GstPi0DType dtype, guint n_dims,
                                                              const gint64 *shape);

GST_PI0_API gsize gst_pi0_dtype_size (GstPi0DType dtype);
GST_PI0_API const gchar *gst_pi0_dtype_to_string (GstPi0DType dtype);
GST_PI0_API gsize gst_pi0_tensor_meta_get_n_elements (const GstPi0TensorMeta *meta);
GST_PI0_API gsize gst_pi0_tensor_meta_get_nbytes (const GstPi0TensorMeta *meta);
GST_PI0_API void gst_pi0_tensor_meta_set_masks (GstPi0TensorMeta *meta, const gboolean *masks,
                                                guint n_masks);

/* Introspectable companions (docs/meta.md, "From Python"). */
GST_PI0_API GstPi0TensorStorage *gst_pi0_tensor_storage_new_from_bytes (GBytes *bytes);

GST_PI0_API GstPi0TensorMeta *gst_buffer_add_pi0_tensor_meta_full (GstBuffer *buffer,
                                                                   GstPi0TensorStorage *storage,
                                                                   GstPi0DType dtype,
                                                                   const gint64 *shape,
                                                                   guint n_dims, GError **error);

GST_PI0_API const gint64 *gst_pi0_tensor_meta_get_shape (const GstPi0TensorMeta *meta,
                                                         guint *n_dims);

GST_PI0_API const gboolean *gst_pi0_tensor_meta_get_masks (const GstPi0TensorMeta *meta,
                                                           guint *n_masks);

GST_PI0_API gboolean gst_pi0_tensor_meta_set_masks_full (GstPi0TensorMeta *meta,
                                                         const gboolean *masks, guint n_masks,
                                                         GError **error);

GST_PI0_API GstBuffer *gst_pi0_tensor_meta_get_data_buffer (const GstPi0TensorMeta *meta,
                                                            GError **error);

G_END_DECLS
