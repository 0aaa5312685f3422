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
 * gst_pi0_tensor_storage_new:
 * @data: the block
 * @nbytes: its size
 * @notify: (nullable): called with @user_data when the last reference goes
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
 *
 * Returns: (transfer full): @nbytes of zeroed host memory, 64-byte aligned.
 */
GstPi0TensorStorage *
gst_pi0_tensor_storage_new_host (gsize nbytes)
{
  gpointer data = g_aligned_alloc0 (1, MAX (nbytes, 1), 64);

  return gst_pi0_tensor_storage_new (data, nbytes, GST_PI0_DEVICE_CPU, 0, data, g_aligned_free);
}

GstPi0TensorStorage *
gst_pi0_tensor_storage_ref (GstPi0TensorStorage *storage)
{
  g_return_val_if_fail (storage != NULL, NULL);
  g_atomic_int_inc (&storage->refcount);
  return storage;
}

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

gpointer
gst_pi0_tensor_storage_get_data (const GstPi0TensorStorage *storage)
{
  g_return_val_if_fail (storage != NULL, NULL);
  return storage->data;
}

gsize
gst_pi0_tensor_storage_get_size (const GstPi0TensorStorage *storage)
{
  g_return_val_if_fail (storage != NULL, 0);
  return storage->nbytes;
}

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
 * gst_buffer_add_pi0_tensor_meta:
 * @buffer: a writable buffer
 * @storage: (transfer none): the memory holding the tensor; the meta takes a reference
 * @shape: (array length=n_dims): the dimensions
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

gsize
gst_pi0_tensor_meta_get_n_elements (const GstPi0TensorMeta *meta)
{
  gsize n = 1;

  g_return_val_if_fail (meta != NULL, 0);
  for (guint i = 0; i < meta->n_dims; i++)
    n *= (gsize)meta->shape[i];
  return n;
}

gsize
gst_pi0_tensor_meta_get_nbytes (const GstPi0TensorMeta *meta)
{
  return gst_pi0_tensor_meta_get_n_elements (meta) * gst_pi0_dtype_size (meta->dtype);
}

/**
 * gst_pi0_tensor_meta_set_masks:
 * @masks: (array length=n_masks): one flag per view
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
