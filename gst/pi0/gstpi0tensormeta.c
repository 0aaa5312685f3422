/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/pi0/gstpi0tensormeta.h"
#include "gst/pi0/gstpi0meta-private.h"

#include <string.h>

GST_DEBUG_CATEGORY_EXTERN (gst_pi0_meta_debug);
#define GST_CAT_DEFAULT gst_pi0_meta_debug

struct _GstPi0TensorStorage {
  gint refcount;
  gpointer data;
  gsize nbytes;
  GstPi0Device device;
  gint device_id;
  gpointer user_data;
  GDestroyNotify notify;
};

G_DEFINE_BOXED_TYPE (GstPi0TensorStorage, gst_pi0_tensor_storage, gst_pi0_tensor_storage_ref,
                     gst_pi0_tensor_storage_unref)

/**
 * gst_pi0_tensor_storage_new: (skip)
 * @data: the block
 * @nbytes: its size
 * @device: where @data lives (#GST_PI0_DEVICE_CPU or #GST_PI0_DEVICE_CUDA)
 * @device_id: the CUDA device ordinal (0 for the CPU)
 * @user_data: passed to @notify
 * @notify: (nullable): called with @user_data when the last reference goes
 *
 * Bindings use gst_pi0_tensor_storage_new_from_bytes() or gst_pi0_tensor_storage_new_host().
 *
 * Returns: (transfer full): a storage with one reference.
 */
GstPi0TensorStorage *
gst_pi0_tensor_storage_new (gpointer data, gsize nbytes, GstPi0Device device, gint device_id,
                            gpointer user_data, GDestroyNotify notify)
{
  GstPi0TensorStorage *s;

  /* Memory is somewhere: AUTO is an element's choice, not a place. */
  g_return_val_if_fail (device == GST_PI0_DEVICE_CPU || device == GST_PI0_DEVICE_CUDA, NULL);
  s = g_new0 (GstPi0TensorStorage, 1);

  s->refcount = 1;
  s->data = data;
  s->nbytes = nbytes;
  s->device = device;
  s->device_id = device_id;
  s->user_data = user_data;
  s->notify = notify;
  return s;
}

/**
 * gst_pi0_tensor_storage_new_host:
 * @nbytes: the size
 *
 * Returns: (transfer full): @nbytes of zeroed host memory, 64-byte aligned.
 */
GstPi0TensorStorage *
gst_pi0_tensor_storage_new_host (gsize nbytes)
{
  gpointer data = g_aligned_alloc0 (1, MAX (nbytes, 1), 64);

  return gst_pi0_tensor_storage_new (data, nbytes, GST_PI0_DEVICE_CPU, 0, data, g_aligned_free);
}

/**
 * gst_pi0_tensor_storage_new_from_bytes:
 * @bytes: (transfer none): host memory holding the tensor
 *
 * A host storage over @bytes' data, without a copy: the storage holds a reference to @bytes.
 * The data is read-only once on a buffer, like any storage's.
 *
 * Returns: (transfer full): a storage with one reference.
 *
 * Since: 0.4
 */
GstPi0TensorStorage *
gst_pi0_tensor_storage_new_from_bytes (GBytes *bytes)
{
  gsize size = 0;
  gconstpointer data;

  g_return_val_if_fail (bytes != NULL, NULL);
  data = g_bytes_get_data (bytes, &size);
  return gst_pi0_tensor_storage_new ((gpointer)data, size, GST_PI0_DEVICE_CPU, 0,
                                     g_bytes_ref (bytes), (GDestroyNotify)g_bytes_unref);
}

/**
 * gst_pi0_tensor_storage_ref:
 * @storage: a storage
 *
 * Returns: (transfer full): @storage, with one more reference.
 */
GstPi0TensorStorage *
gst_pi0_tensor_storage_ref (GstPi0TensorStorage *storage)
{
  g_return_val_if_fail (storage != NULL, NULL);
  g_atomic_int_inc (&storage->refcount);
  return storage;
}

/**
 * gst_pi0_tensor_storage_unref:
 * @storage: (transfer full): a storage
 *
 * Drops one reference; the last one gives the memory back.
 */
void
gst_pi0_tensor_storage_unref (GstPi0TensorStorage *storage)
{
  g_return_if_fail (storage != NULL);
  if (g_atomic_int_dec_and_test (&storage->refcount)) {
    if (storage->notify)
      storage->notify (storage->user_data);
    g_free (storage);
  }
}

/**
 * gst_pi0_tensor_storage_get_data: (skip)
 * @storage: a storage
 *
 * Returns: (transfer none): the block (host or device memory). Bindings read host data through
 *   gst_pi0_tensor_meta_get_data_buffer().
 */
gpointer
gst_pi0_tensor_storage_get_data (const GstPi0TensorStorage *storage)
{
  g_return_val_if_fail (storage != NULL, NULL);
  return storage->data;
}

/**
 * gst_pi0_tensor_storage_get_size:
 * @storage: a storage
 *
 * Returns: the block's size in bytes.
 */
gsize
gst_pi0_tensor_storage_get_size (const GstPi0TensorStorage *storage)
{
  g_return_val_if_fail (storage != NULL, 0);
  return storage->nbytes;
}

/**
 * gst_pi0_tensor_storage_get_device:
 * @storage: a storage
 * @device_id: (out) (optional): the CUDA device ordinal (0 for the CPU)
 *
 * Returns: where the block lives.
 */
GstPi0Device
gst_pi0_tensor_storage_get_device (const GstPi0TensorStorage *storage, gint *device_id)
{
  g_return_val_if_fail (storage != NULL, GST_PI0_DEVICE_CPU);
  if (device_id)
    *device_id = storage->device_id;
  return storage->device;
}

GType
gst_pi0_tensor_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = {NULL};

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstPi0TensorMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
gst_pi0_tensor_meta_init (GstMeta *meta, gpointer params, GstBuffer *buffer)
{
  GstPi0TensorMeta *m = (GstPi0TensorMeta *)meta;

  m->version = GST_PI0_META_VERSION;
  m->dtype = GST_PI0_DTYPE_FLOAT32;
  m->device = GST_PI0_DEVICE_CPU;
  m->device_id = 0;
  m->n_dims = 0;
  memset (m->shape, 0, sizeof (m->shape));
  m->data = NULL;
  m->storage = NULL;
  m->n_masks = 0;
  memset (m->image_masks, 0, sizeof (m->image_masks));
  m->ready_event = NULL;
  m->prepared_time = GST_CLOCK_TIME_NONE;
  return TRUE;
}

static void
gst_pi0_tensor_meta_free (GstMeta *meta, GstBuffer *buffer)
{
  GstPi0TensorMeta *m = (GstPi0TensorMeta *)meta;

  g_clear_pointer (&m->storage, gst_pi0_tensor_storage_unref);
}

static gboolean
gst_pi0_tensor_meta_transform (GstBuffer *dest, GstMeta *meta, GstBuffer *buffer, GQuark type,
                               gpointer data)
{
  GstPi0TensorMeta *src = (GstPi0TensorMeta *)meta;
  GstPi0TensorMeta *dst;

  if (!GST_META_TRANSFORM_IS_COPY (type))
    return FALSE;
  /* The tensor does not live in the buffer's memories, so any copy can share it. */
  dst = gst_buffer_add_pi0_tensor_meta (dest, src->storage, src->dtype, src->n_dims, src->shape);
  if (!dst)
    return FALSE;
  dst->version = src->version;
  dst->data = src->data;
  gst_pi0_tensor_meta_set_masks (dst, src->image_masks, src->n_masks);
  dst->ready_event = src->ready_event;
  dst->prepared_time = src->prepared_time;
  return TRUE;
}

const GstMetaInfo *
gst_pi0_tensor_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **)&info)) {
    gst_pi0_meta_debug_ensure ();
    const GstMetaInfo *mi = gst_meta_register (
        GST_PI0_TENSOR_META_API_TYPE, "GstPi0TensorMeta", sizeof (GstPi0TensorMeta),
        gst_pi0_tensor_meta_init, gst_pi0_tensor_meta_free, gst_pi0_tensor_meta_transform);
    g_once_init_leave ((GstMetaInfo **)&info, (GstMetaInfo *)mi);
  }
  return info;
}

/**
 * gst_pi0_dtype_size:
 * @dtype: an element type
 *
 * Returns: the size of one element in bytes (0 for an unknown @dtype).
 */
gsize
gst_pi0_dtype_size (GstPi0DType dtype)
{
  switch (dtype) {
    case GST_PI0_DTYPE_FLOAT32:
      return 4;
    case GST_PI0_DTYPE_FLOAT16:
    case GST_PI0_DTYPE_BFLOAT16:
      return 2;
    case GST_PI0_DTYPE_UINT8:
      return 1;
  }
  return 0;
}

/**
 * gst_pi0_dtype_get_type:
 *
 * The #GstPi0DType enum as a GType (the nicks are what gst_pi0_dtype_to_string() returns), for
 * the elements' `dtype` properties and bindings.
 *
 * Since: 0.3
 */
GType
gst_pi0_dtype_get_type (void)
{
  static gsize id = 0;
  static const GEnumValue values[] = {
      {GST_PI0_DTYPE_FLOAT32, "float32", "float32"},
      {GST_PI0_DTYPE_FLOAT16, "IEEE float16 (round to nearest even)", "float16"},
      {GST_PI0_DTYPE_BFLOAT16, "bfloat16 (round to nearest even)", "bfloat16"},
      {GST_PI0_DTYPE_UINT8, "Unsigned 8-bit", "uint8"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_enum_register_static ("GstPi0DType", values));
  return (GType)id;
}

/**
 * gst_pi0_device_get_type:
 *
 * The #GstPi0Device enum as a GType, for the elements' `device` properties and bindings.
 *
 * Since: 0.3
 */
GType
gst_pi0_device_get_type (void)
{
  static gsize id = 0;
  static const GEnumValue values[] = {
      {GST_PI0_DEVICE_CPU, "The CPU", "cpu"},
      {GST_PI0_DEVICE_CUDA, "CUDA (an element fails to start without a usable device)", "cuda"},
      {GST_PI0_DEVICE_AUTO, "CUDA when a device is usable, otherwise the CPU", "auto"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_enum_register_static ("GstPi0Device", values));
  return (GType)id;
}

/**
 * gst_pi0_dtype_to_string:
 * @dtype: an element type
 *
 * Returns: (transfer none): its name, the enum's nick (`float32`, ...), or `unknown`.
 */
const gchar *
gst_pi0_dtype_to_string (GstPi0DType dtype)
{
  switch (dtype) {
    case GST_PI0_DTYPE_FLOAT32:
      return "float32";
    case GST_PI0_DTYPE_FLOAT16:
      return "float16";
    case GST_PI0_DTYPE_BFLOAT16:
      return "bfloat16";
    case GST_PI0_DTYPE_UINT8:
      return "uint8";
  }
  return "unknown";
}

/**
 * gst_buffer_get_pi0_tensor_meta:
 * @buffer: a #GstBuffer
 *
 * Returns: (transfer none) (nullable): the tensor meta of @buffer, valid while @buffer lives
 *   and keeps it, or %NULL.
 */
GstPi0TensorMeta *
gst_buffer_get_pi0_tensor_meta (GstBuffer *buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstPi0TensorMeta *)gst_buffer_get_meta (buffer, GST_PI0_TENSOR_META_API_TYPE);
}

/**
 * gst_buffer_add_pi0_tensor_meta: (skip)
 * @buffer: a writable buffer
 * @storage: (transfer none): the memory holding the tensor; the meta takes a reference
 * @dtype: the element type
 * @n_dims: number of dimensions, at most #GST_PI0_TENSOR_MAX_DIMS
 * @shape: (array length=n_dims): the dimensions
 *
 * Bindings use gst_buffer_add_pi0_tensor_meta_full(), which reports bad input as an error.
 *
 * Adds a tensor whose data starts at the beginning of @storage, on @storage's device. Fails
 * (returns %NULL) when the shape needs more bytes than @storage holds.
 *
 * Returns: (transfer none) (nullable): the meta.
 */
GstPi0TensorMeta *
gst_buffer_add_pi0_tensor_meta (GstBuffer *buffer, GstPi0TensorStorage *storage, GstPi0DType dtype,
                                guint n_dims, const gint64 *shape)
{
  GstPi0TensorMeta *m;
  gsize n = 1;

  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  g_return_val_if_fail (storage != NULL, NULL);
  g_return_val_if_fail (n_dims <= GST_PI0_TENSOR_MAX_DIMS, NULL);
  g_return_val_if_fail (n_dims == 0 || shape != NULL, NULL);

  for (guint i = 0; i < n_dims; i++) {
    g_return_val_if_fail (shape[i] >= 0, NULL);
    n *= (gsize)shape[i];
  }
  if (n * gst_pi0_dtype_size (dtype) > storage->nbytes) {
    GST_WARNING ("tensor needs %" G_GSIZE_FORMAT " bytes, storage holds %" G_GSIZE_FORMAT,
                 n * gst_pi0_dtype_size (dtype), storage->nbytes);
    return NULL;
  }

  m = (GstPi0TensorMeta *)gst_buffer_add_meta (buffer, GST_PI0_TENSOR_META_INFO, NULL);
  if (!m)
    return NULL;
  m->dtype = dtype;
  m->device = storage->device;
  m->device_id = storage->device_id;
  m->n_dims = n_dims;
  for (guint i = 0; i < n_dims; i++)
    m->shape[i] = shape[i];
  m->storage = gst_pi0_tensor_storage_ref (storage);
  m->data = storage->data;
  return m;
}

/**
 * gst_pi0_tensor_meta_get_n_elements:
 * @meta: a tensor meta
 *
 * Returns: the number of elements (the product of the shape).
 */
gsize
gst_pi0_tensor_meta_get_n_elements (const GstPi0TensorMeta *meta)
{
  gsize n = 1;

  g_return_val_if_fail (meta != NULL, 0);
  for (guint i = 0; i < meta->n_dims; i++)
    n *= (gsize)meta->shape[i];
  return n;
}

/**
 * gst_pi0_tensor_meta_get_nbytes:
 * @meta: a tensor meta
 *
 * Returns: the size of the tensor's data in bytes.
 */
gsize
gst_pi0_tensor_meta_get_nbytes (const GstPi0TensorMeta *meta)
{
  return gst_pi0_tensor_meta_get_n_elements (meta) * gst_pi0_dtype_size (meta->dtype);
}

/**
 * gst_pi0_tensor_meta_set_masks:
 * @meta: a tensor meta
 * @masks: (array length=n_masks): one flag per view
 * @n_masks: number of views, at most #GST_PI0_MAX_VIEWS
 */
void
gst_pi0_tensor_meta_set_masks (GstPi0TensorMeta *meta, const gboolean *masks, guint n_masks)
{
  g_return_if_fail (meta != NULL);
  g_return_if_fail (n_masks <= GST_PI0_MAX_VIEWS);
  g_return_if_fail (n_masks == 0 || masks != NULL);

  meta->n_masks = n_masks;
  for (guint i = 0; i < GST_PI0_MAX_VIEWS; i++)
    meta->image_masks[i] = i < n_masks ? (masks[i] != FALSE) : FALSE;
}

/**
 * gst_buffer_add_pi0_tensor_meta_full:
 * @buffer: a writable buffer
 * @storage: (transfer none): the memory holding the tensor; the meta takes a reference
 * @dtype: the element type
 * @shape: (array length=n_dims): the dimensions, outermost first, each >= 0
 * @n_dims: number of dimensions, at most #GST_PI0_TENSOR_MAX_DIMS
 * @error: return location for a #GST_PI0_ERROR
 *
 * gst_buffer_add_pi0_tensor_meta() with bad input (too many dimensions, a negative one, a
 * shape larger than @storage, a buffer that is not writable) reported as an error rather than
 * as a GLib critical: what bindings call.
 *
 * Returns: (transfer none) (nullable): the meta, or %NULL with @error set.
 *
 * Since: 0.4
 */
GstPi0TensorMeta *
gst_buffer_add_pi0_tensor_meta_full (GstBuffer *buffer, GstPi0TensorStorage *storage,
                                     GstPi0DType dtype, const gint64 *shape, guint n_dims,
                                     GError **error)
{
  gsize n = 1;

  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  g_return_val_if_fail (storage != NULL, NULL);
  g_return_val_if_fail (n_dims == 0 || shape != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (gst_pi0_dtype_size (dtype) == 0) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID, "unknown dtype %d", (gint)dtype);
    return NULL;
  }
  if (n_dims > GST_PI0_TENSOR_MAX_DIMS) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "a tensor has at most %d dimensions (got %u)", GST_PI0_TENSOR_MAX_DIMS, n_dims);
    return NULL;
  }
  for (guint i = 0; i < n_dims; i++) {
    if (shape[i] < 0) {
      g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                   "dimension %u is negative (%" G_GINT64_FORMAT ")", i, shape[i]);
      return NULL;
    }
    if (shape[i] > 0 && n > G_MAXSIZE / (gsize)shape[i] / 8) {
      g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID, "the shape overflows");
      return NULL;
    }
    n *= (gsize)shape[i];
  }
  if (n * gst_pi0_dtype_size (dtype) > storage->nbytes) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "the tensor needs %" G_GSIZE_FORMAT " bytes, its storage holds %" G_GSIZE_FORMAT,
                 n * gst_pi0_dtype_size (dtype), storage->nbytes);
    return NULL;
  }
  if (!gst_pi0_meta_check_writable (buffer, error))
    return NULL;
  return gst_buffer_add_pi0_tensor_meta (buffer, storage, dtype, n_dims, shape);
}

/**
 * gst_pi0_tensor_meta_get_shape:
 * @meta: a tensor meta
 * @n_dims: (out): number of dimensions
 *
 * Returns: (transfer none) (array length=n_dims): the dimensions, outermost first (the
 *   shape field with its length, for bindings), owned by @meta.
 *
 * Since: 0.4
 */
const gint64 *
gst_pi0_tensor_meta_get_shape (const GstPi0TensorMeta *meta, guint *n_dims)
{
  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (n_dims != NULL, NULL);
  *n_dims = meta->n_dims;
  return meta->shape;
}

/**
 * gst_pi0_tensor_meta_get_masks:
 * @meta: a tensor meta
 * @n_masks: (out): number of views
 *
 * Returns: (transfer none) (array length=n_masks): %TRUE where a view holds a real image (the
 *   image_masks field with its length, for bindings), owned by @meta.
 *
 * Since: 0.4
 */
const gboolean *
gst_pi0_tensor_meta_get_masks (const GstPi0TensorMeta *meta, guint *n_masks)
{
  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (n_masks != NULL, NULL);
  *n_masks = meta->n_masks;
  return meta->image_masks;
}

/**
 * gst_pi0_tensor_meta_set_masks_full:
 * @meta: a tensor meta
 * @masks: (array length=n_masks): one flag per view
 * @n_masks: number of views, at most #GST_PI0_MAX_VIEWS
 * @error: return location for a #GST_PI0_ERROR
 *
 * gst_pi0_tensor_meta_set_masks() with too many masks reported as an error (the meta is left
 * as it was).
 *
 * Returns: %TRUE, or %FALSE with @error set.
 *
 * Since: 0.4
 */
gboolean
gst_pi0_tensor_meta_set_masks_full (GstPi0TensorMeta *meta, const gboolean *masks, guint n_masks,
                                    GError **error)
{
  g_return_val_if_fail (meta != NULL, FALSE);
  g_return_val_if_fail (n_masks == 0 || masks != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (n_masks > GST_PI0_MAX_VIEWS) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_INVALID,
                 "%u masks given: an observation has at most %d views", n_masks, GST_PI0_MAX_VIEWS);
    return FALSE;
  }
  gst_pi0_tensor_meta_set_masks (meta, masks, n_masks);
  return TRUE;
}

/**
 * gst_pi0_tensor_meta_get_data_buffer:
 * @meta: a tensor meta
 * @error: return location for a #GST_PI0_ERROR
 *
 * The tensor's data as the one read-only memory of a new buffer, without a copy:
 * gst_pi0_tensor_meta_get_nbytes() bytes of @meta's dtype, contiguous, in the order of its
 * shape. The new buffer holds a reference to the meta's storage, so the data stays valid for
 * as long as the new buffer lives, after the observation buffer is gone. This is how Python
 * reads the model input as a numpy array (docs/meta.md).
 *
 * Returns: (transfer full) (nullable): the data, or %NULL with @error set when it lives in
 *   device (CUDA) memory, which the CPU cannot map.
 *
 * Since: 0.4
 */
GstBuffer *
gst_pi0_tensor_meta_get_data_buffer (const GstPi0TensorMeta *meta, GError **error)
{
  GstBuffer *data;
  gsize size;

  g_return_val_if_fail (meta != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (meta->device != GST_PI0_DEVICE_CPU || !meta->storage) {
    g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_UNAVAILABLE,
                 "the tensor lives in %s memory, which the CPU cannot map (cudaprep "
                 "device=cpu makes host tensors)",
                 meta->device == GST_PI0_DEVICE_CUDA ? "CUDA" : "no");
    return NULL;
  }
  size = gst_pi0_tensor_meta_get_nbytes (meta);
  data = gst_buffer_new ();
  if (size > 0) {
    gst_buffer_append_memory (
        data, gst_memory_new_wrapped (GST_MEMORY_FLAG_READONLY, meta->data, size, 0, size,
                                      gst_pi0_tensor_storage_ref (meta->storage),
                                      (GDestroyNotify)gst_pi0_tensor_storage_unref));
  }
  return data;
}
