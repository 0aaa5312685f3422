/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-cudaprep
 * @title: cudaprep
 *
 * Turns the camera views of each observation (`application/x-pi0-observation`, from
 * pi0viewmux) into the Pi0 model input: every view is converted to RGB, resized (openpi's
 * resize-with-pad by default, with PIL's antialiased bilinear filter), normalized and laid out
 * as `[V, 3, H, W]`, then attached to the buffer as a #GstPi0TensorMeta with the image masks.
 * The buffer and its view frames pass through untouched.
 *
 * On a GPU each view runs on its own CUDA stream (frames in system memory are uploaded from
 * pinned staging buffers, `memory:CUDAMemory` frames are read in place), the output comes from a
 * pool of device blocks, and the meta carries a CUDA event that the next element waits on; no
 * CPU synchronisation happens on the streaming thread. Without a GPU the same results come from
 * a multi-threaded CPU path.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0viewmux name=m ! cudaprep device=cpu ! fakesink \
 *     videotestsrc ! m.main  videotestsrc ! m.side  videotestsrc ! m.top
 * ]|
 *
 * Since: 0.1
 */

/* The element is glue over kernels/: the CPU twin (pi0::prep::prep_cpu) and, on a GPU,
 * pi0::prep::CudaRunner (the per-view streams, staging, upload and join events, the device
 * block pool). Here: properties, caps, mapping the views' frames, the tensor meta, and the CUDA
 * context shared with GStreamer's CUDA elements.
 *
 * Threads and locks: settings_lock guards Settings (properties) and is only held to copy them;
 * State belongs to the streaming thread (and start/stop, which GstBaseTransform serialises with
 * it). Output blocks go back to their pool from whatever thread drops the last buffer reference;
 * the pool has its own lock, taken last. Lock order: settings_lock, then a pool's lock. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/cudaprep/gstcudaprep.h"

#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include "kernels/pi0prep.h"
#ifdef HAVE_CUDA
#include "kernels/pi0prepcuda.h"
#endif
#ifdef HAVE_GST_CUDA
#include <gst/cuda/gstcudacontext.h>
#include <gst/cuda/gstcudaloader.h>
#include <gst/cuda/gstcudamemory.h>
#include <gst/cuda/gstcudautils.h>
#endif

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_cuda_prep_debug);
#define GST_CAT_DEFAULT gst_pi0_cuda_prep_debug

namespace
{

const float kImagenetMean[3] = {0.485f, 0.456f, 0.406f};
const float kImagenetStd[3] = {0.229f, 0.224f, 0.225f};

enum {
  PROP_0,
  PROP_WIDTH,
  PROP_HEIGHT,
  PROP_RESIZE,
  PROP_FILTER,
  PROP_NORMALIZE,
  PROP_MEAN,
  PROP_STD,
  PROP_DTYPE,
  PROP_DEVICE,
  PROP_CUDA_DEVICE_ID,
  PROP_N_THREADS,
};

/* The properties, each starting at its default (the param specs read them here). */
struct Settings {
  int width = 224, height = 224;
  GstPi0CudaPrepResize resize = GST_PI0_CUDA_PREP_RESIZE_PAD;
  GstPi0CudaPrepFilter filter = GST_PI0_CUDA_PREP_FILTER_ANTIALIAS;
  GstPi0CudaPrepNormalize normalize = GST_PI0_CUDA_PREP_NORMALIZE_PI0;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  GstPi0DType dtype = GST_PI0_DTYPE_FLOAT32;
  GstPi0Device device = GST_PI0_DEVICE_AUTO;
  int cuda_device_id = -1; /* -1: auto */
  guint n_threads = 0;     /* 0: one per CPU core */
};

/* The tensor's dtypes are the meta's, in the meta's order. */
static_assert ((int)pi0::prep::DType::Float32 == GST_PI0_DTYPE_FLOAT32 &&
                   (int)pi0::prep::DType::Float16 == GST_PI0_DTYPE_FLOAT16 &&
                   (int)pi0::prep::DType::BFloat16 == GST_PI0_DTYPE_BFLOAT16,
               "kernels/ and the tensor meta number their dtypes alike");

#ifdef HAVE_CUDA
struct CudaState {
  int device = 0;
  pi0::prep::PrimaryContext primary; /* kept while we run, shared with GStreamer's CUDA */
  pi0::prep::CudaRunner runner;      /* goes first */
};
#endif

struct State {
  bool use_cuda = false;
  std::unique_ptr<pi0::prep::ThreadPool> threads;
  std::shared_ptr<pi0::prep::BlockPool> host_pool;
#ifdef HAVE_CUDA
  std::unique_ptr<CudaState> cuda;
#endif
};

/* A view's GstVideoFrame, unmapped on scope exit. */
struct MappedView {
  GstVideoFrame frame;
  bool mapped = false;
  ~MappedView ()
  {
    if (mapped)
      gst_video_frame_unmap (&frame);
  }
};

bool
to_pi0_format (GstVideoFormat f, pi0::prep::Format &out)
{
  return pi0::prep::format_from_name (gst_video_format_to_string (f), &out);
}

/* The frame's YUV matrix and range; when the colorimetry leaves them unknown, GStreamer's own
 * defaults (BT.601 for SD, BT.709 for HD, limited range). */
pi0::prep::YuvMatrix
yuv_matrix_for (const GstVideoInfo *info)
{
  GstVideoColorMatrix m = info->colorimetry.matrix;
  if (m == GST_VIDEO_COLOR_MATRIX_UNKNOWN || m == GST_VIDEO_COLOR_MATRIX_RGB)
    m = GST_VIDEO_INFO_HEIGHT (info) > 576 ? GST_VIDEO_COLOR_MATRIX_BT709
                                           : GST_VIDEO_COLOR_MATRIX_BT601;
  gdouble kr = 0.299, kb = 0.114;
  if (!gst_video_color_matrix_get_Kr_Kb (m, &kr, &kb)) {
    kr = 0.299;
    kb = 0.114;
  }
  return pi0::prep::make_yuv_matrix (kr, kb,
                                     info->colorimetry.range == GST_VIDEO_COLOR_RANGE_0_255);
}

pi0::prep::Params
to_params (const Settings &s)
{
  pi0::prep::Params p;
  p.out_width = s.width;
  p.out_height = s.height;
  p.resize = s.resize == GST_PI0_CUDA_PREP_RESIZE_PAD       ? pi0::prep::Resize::Pad
             : s.resize == GST_PI0_CUDA_PREP_RESIZE_STRETCH ? pi0::prep::Resize::Stretch
                                                            : pi0::prep::Resize::Crop;
  p.filter = s.filter == GST_PI0_CUDA_PREP_FILTER_ANTIALIAS ? pi0::prep::Filter::Antialias
             : s.filter == GST_PI0_CUDA_PREP_FILTER_PIL     ? pi0::prep::Filter::Pil
                                                            : pi0::prep::Filter::Bilinear;
  const float *mean = s.mean, *std = s.std;
  static const float half[3] = {0.5f, 0.5f, 0.5f};
  if (s.normalize == GST_PI0_CUDA_PREP_NORMALIZE_PI0) {
    mean = half;
    std = half;
  } else if (s.normalize == GST_PI0_CUDA_PREP_NORMALIZE_IMAGENET) {
    mean = kImagenetMean;
    std = kImagenetStd;
  }
  std::memcpy (p.mean, mean, sizeof (p.mean));
  std::memcpy (p.std, std, sizeof (p.std));
  p.dtype = (pi0::prep::DType)s.dtype; /* uint8 is refused when set */
  return p;
}

} // namespace

struct GstPi0CudaPrepPrivate {
  std::mutex settings_lock;
  Settings settings; /* under settings_lock */
  State state;       /* the streaming thread's */
  bool said_cpu = false; /* the INFO line for device=auto without a GPU, once */
#ifdef HAVE_GST_CUDA
  GstCudaContext *gst_context = nullptr; /* shared through gst.cuda.context */
#endif
};

struct _GstPi0CudaPrep {
  GstBaseTransform parent;
  GstPi0CudaPrepPrivate *priv;
};

#define gst_pi0_cuda_prep_parent_class parent_class
G_DEFINE_TYPE (GstPi0CudaPrep, gst_pi0_cuda_prep, GST_TYPE_BASE_TRANSFORM);
GST_ELEMENT_REGISTER_DEFINE_WITH_CODE (
    cudaprep, "cudaprep", GST_RANK_NONE, GST_TYPE_PI0_CUDA_PREP,
    GST_DEBUG_CATEGORY_INIT (gst_pi0_cuda_prep_debug, "cudaprep", 0,
                             "Pi0 view preprocessing (resize, pad, normalize)"));

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_CAPS));

/* ---- enums ---- */

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_cuda_prep_resize_get_type, "GstPi0CudaPrepResize",
    {GST_PI0_CUDA_PREP_RESIZE_PAD, "Keep aspect ratio, centre, black padding (openpi)", "pad"},
    {GST_PI0_CUDA_PREP_RESIZE_STRETCH, "Scale each axis to the output size", "stretch"},
    {GST_PI0_CUDA_PREP_RESIZE_CROP, "Keep aspect ratio, fill, cut the centre", "crop"})
GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_cuda_prep_filter_get_type, "GstPi0CudaPrepFilter",
    {GST_PI0_CUDA_PREP_FILTER_ANTIALIAS, "PIL bilinear, antialiased when downscaling (openpi)",
     "antialias"},
    {GST_PI0_CUDA_PREP_FILTER_BILINEAR,
     "torch interpolate bilinear, align_corners=False, no antialias (LeRobot)", "bilinear"},
    {GST_PI0_CUDA_PREP_FILTER_PIL,
     "PIL bilinear in PIL's pass order: bit-identical to openpi "
     "on landscape frames, slower on the CPU",
     "pil"})
GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_cuda_prep_normalize_get_type, "GstPi0CudaPrepNormalize",
                          {GST_PI0_CUDA_PREP_NORMALIZE_PI0,
                           "x/255*2 - 1 in float32 as openpi, range [-1, 1] (Pi0)", "pi0"},
                          {GST_PI0_CUDA_PREP_NORMALIZE_IMAGENET, "ImageNet mean and std",
                           "imagenet"},
                          {GST_PI0_CUDA_PREP_NORMALIZE_CUSTOM, "The mean and std properties",
                           "custom"})

/* ---- properties ---- */

static void
set_float3 (const GValue *value, float out[3])
{
  const guint n = gst_value_array_get_size (value);
  for (guint i = 0; i < 3 && i < n; i++) {
    const GValue *v = gst_value_array_get_value (value, i);
    out[i] = G_VALUE_HOLDS_FLOAT (v)    ? g_value_get_float (v)
             : G_VALUE_HOLDS_DOUBLE (v) ? (float)g_value_get_double (v)
                                        : out[i];
  }
  /* One value means the same for the three channels. */
  if (n == 1)
    out[1] = out[2] = out[0];
}

static void
get_float3 (GValue *value, const float in[3])
{
  for (int i = 0; i < 3; i++) {
    GValue v = G_VALUE_INIT;
    g_value_init (&v, G_TYPE_FLOAT);
    g_value_set_float (&v, in[i]);
    gst_value_array_append_and_take_value (value, &v);
  }
}

/* Every property, both directions (gstpi0props.h); mean and std are float arrays. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_FIELD (PROP_WIDTH, width, gint, int)
    GST_PI0_PROP_FIELD (PROP_HEIGHT, height, gint, int)
    GST_PI0_PROP_FIELD (PROP_RESIZE, resize, gint, enum)
    GST_PI0_PROP_FIELD (PROP_FILTER, filter, gint, enum)
    GST_PI0_PROP_FIELD (PROP_NORMALIZE, normalize, gint, enum)
    case PROP_DTYPE:
      if (!set)
        g_value_set_enum (value, s.dtype);
      else if (g_value_get_enum (value) == GST_PI0_DTYPE_UINT8)
        g_warning ("cudaprep: dtype must be float32, float16 or bfloat16 (the model input is "
                   "normalized); keeping the previous value");
      else
        s.dtype = (GstPi0DType)g_value_get_enum (value);
      return true;
    GST_PI0_PROP_FIELD (PROP_DEVICE, device, gint, enum)
    GST_PI0_PROP_FIELD (PROP_CUDA_DEVICE_ID, cuda_device_id, gint, int)
    GST_PI0_PROP_FIELD (PROP_N_THREADS, n_threads, guint, uint)
    case PROP_MEAN:
      if (set)
        set_float3 (value, s.mean);
      else
        get_float3 (value, s.mean);
      return true;
    case PROP_STD:
      if (!set) {
        get_float3 (value, s.std);
      } else {
        float v[3] = {s.std[0], s.std[1], s.std[2]};
        set_float3 (value, v);
        if (v[0] > 0 && v[1] > 0 && v[2] > 0)
          std::memcpy (s.std, v, sizeof (v));
        else
          g_warning ("cudaprep: std must be > 0 for every channel; keeping the previous value");
      }
      return true;
  }
  return false;
}

static void
gst_pi0_cuda_prep_set_property (GObject *object, guint prop_id, const GValue *value,
                                GParamSpec *pspec)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (object);
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_cuda_prep_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (object);
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

/* ---- start / stop ---- */

#ifdef HAVE_CUDA
static bool
cuda_start (GstPi0CudaPrep *self, int device)
{
  GstPi0CudaPrepPrivate *priv = self->priv;
  auto cs = std::make_unique<CudaState> ();
  cs->device = device;
  const char *what = "";
  const cudaError_t err = cs->runner.init (device, GST_PI0_MAX_VIEWS, &what);
  if (err != cudaSuccess) {
    GST_ELEMENT_ERROR (
        self, RESOURCE, FAILED,
        ("CUDA error while %s: %s", what, pi0::prep::cuda_error_text (err).c_str ()), (nullptr));
    return false;
  }
  /* cudart works in the device's primary context; keep it alive while we run and publish it,
   * so nvcodec elements allocate where our kernels (and LibTorch) can read in place. */
  cs->primary.retain (device);
#ifdef HAVE_GST_CUDA
  if (!priv->gst_context && cs->primary.get () && gst_cuda_load_library ()) {
    priv->gst_context = gst_cuda_context_new_wrapped ((CUcontext)cs->primary.get (), device);
    if (priv->gst_context) {
      GstContext *ctx = gst_context_new_cuda_context (priv->gst_context);
      gst_element_post_message (GST_ELEMENT (self),
                                gst_message_new_have_context (GST_OBJECT (self), ctx));
    }
  }
#endif
  priv->state.cuda = std::move (cs);
  return true;
}
#endif

static gboolean
gst_pi0_cuda_prep_start (GstBaseTransform *bt)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (bt);
  GstPi0CudaPrepPrivate *priv = self->priv;
  Settings s;
  {
    std::lock_guard<std::mutex> lk (priv->settings_lock);
    s = priv->settings;
  }
  State &st = priv->state;
  st = State ();
  st.use_cuda = false;

  if (s.device != GST_PI0_DEVICE_CPU) {
    std::string why;
    [[maybe_unused]] const int device = s.cuda_device_id < 0 ? 0 : s.cuda_device_id;
#ifdef HAVE_CUDA
    int n = 0;
    cudaError_t err = cudaGetDeviceCount (&n);
    if (err != cudaSuccess)
      why = "cudaGetDeviceCount: " + pi0::prep::cuda_error_text (err);
    else if (device >= n)
      why = "cuda-device-id " + std::to_string (device) + " but " + std::to_string (n) +
            " device(s) present";
    else
      st.use_cuda = true;
#else
    why = "this build has no CUDA support";
#endif
    if (!st.use_cuda) {
      if (s.device == GST_PI0_DEVICE_CUDA) {
        GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
                           ("No usable CUDA device for device=cuda (set device=auto or cpu to "
                            "use the CPU path)"),
                           ("%s", why.c_str ()));
        return FALSE;
      }
      if (!priv->said_cpu) {
        GST_INFO_OBJECT (self, "no usable CUDA device (%s): using the CPU path", why.c_str ());
        priv->said_cpu = true;
      }
    }
#ifdef HAVE_CUDA
    if (st.use_cuda && !cuda_start (self, device)) {
      st = State ();
      return FALSE;
    }
#endif
  }

  const guint n_threads =
      s.n_threads ? s.n_threads : std::max (1u, std::thread::hardware_concurrency ());
  st.threads = std::make_unique<pi0::prep::ThreadPool> ((int)n_threads);
  st.host_pool = pi0::prep::BlockPool::host ();
  GST_DEBUG_OBJECT (self, "started on %s, %u CPU threads", st.use_cuda ? "CUDA" : "the CPU",
                    n_threads);
  return TRUE;
}

static gboolean
gst_pi0_cuda_prep_stop (GstBaseTransform *bt)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (bt);
  State &st = self->priv->state;
  /* Blocks still held by buffers downstream are freed when those buffers go. */
  if (st.host_pool)
    st.host_pool->close ();
#ifdef HAVE_CUDA
  if (st.cuda) {
    st.cuda->runner.close ();
    st.cuda->runner.synchronize ();
    st.cuda.reset (); /* the runner, then the context */
  }
#endif
  st = State ();
  return TRUE;
}

/* ---- the work ---- */

static GstFlowReturn
gst_pi0_cuda_prep_transform_ip (GstBaseTransform *bt, GstBuffer *buf)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (bt);
  GstPi0CudaPrepPrivate *priv = self->priv;
  State &st = priv->state;
  Settings s;
  {
    std::lock_guard<std::mutex> lk (priv->settings_lock);
    s = priv->settings;
  }
  const pi0::prep::Params p = to_params (s);

  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
  if (!meta) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("Observation buffer without a GstPi0ObservationMeta"),
                       ("cudaprep needs the views described by pi0viewmux's meta"));
    return GST_FLOW_ERROR;
  }
  const guint n = gst_pi0_observation_meta_get_n_views (meta);
  if (n == 0) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("Observation without views"), (NULL));
    return GST_FLOW_ERROR;
  }

  std::vector<MappedView> maps (n);
  std::vector<pi0::prep::Image> imgs (n);
  [[maybe_unused]] bool in_device[GST_PI0_MAX_VIEWS] = {false}; /* read only with GstCuda */
  gboolean masks[GST_PI0_MAX_VIEWS] = {FALSE};
  for (guint i = 0; i < n; i++) {
    const GstPi0View *v = gst_pi0_observation_meta_get_view (meta, i);
    pi0::prep::Image &im = imgs[i];
    if (!(v->flags & GST_PI0_VIEW_FLAG_VALID))
      continue; /* masked: pad value, mask FALSE */
    const GstVideoFormat vf = GST_VIDEO_INFO_FORMAT (&v->info);
    if (!to_pi0_format (vf, im.format)) {
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                         ("View '%s' has format %s, which cudaprep does not support", v->name,
                          gst_video_format_to_string (vf)),
                         ("supported: %s", pi0::prep::format_list ().c_str ()));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    GstMapFlags flags = GST_MAP_READ;
#ifdef HAVE_GST_CUDA
    if (st.use_cuda && v->n_mem > 0 && v->mem_index < gst_buffer_n_memory (buf)) {
      GstMemory *mem = gst_buffer_peek_memory (buf, v->mem_index);
      if (gst_is_cuda_memory (mem) && st.cuda->primary.get () &&
          gst_cuda_context_get_handle (GST_CUDA_MEMORY_CAST (mem)->context) ==
              st.cuda->primary.get ()) {
        /* Read in place: device pointers, no download. */
        flags = (GstMapFlags)(GST_MAP_READ | GST_MAP_CUDA);
        in_device[i] = true;
      } else if (gst_is_cuda_memory (mem)) {
        GST_WARNING_OBJECT (self,
                            "view %s: CUDA memory from another context; reading it "
                            "through the host",
                            v->name);
      }
    }
#endif
    if (!gst_pi0_observation_meta_map_view (meta, buf, i, &maps[i].frame, flags)) {
      GST_ELEMENT_ERROR (
          self, STREAM, FORMAT,
          ("View '%s': its memories do not hold the %dx%d %s frame that the meta "
           "describes",
           v->name, GST_VIDEO_INFO_WIDTH (&v->info), GST_VIDEO_INFO_HEIGHT (&v->info),
           gst_video_format_to_string (vf)),
          ("strides, offsets or sizes reach past the view's %u memory(ies)", v->n_mem));
      return GST_FLOW_ERROR;
    }
    maps[i].mapped = true;
    const GstVideoFrame &f = maps[i].frame;
    im.width = GST_VIDEO_FRAME_WIDTH (&f);
    im.height = GST_VIDEO_FRAME_HEIGHT (&f);
    for (int pl = 0; pl < pi0::prep::format_n_planes (im.format); pl++) {
      im.planes[pl] = static_cast<const uint8_t *> (GST_VIDEO_FRAME_PLANE_DATA (&f, pl));
      const gint stride = GST_VIDEO_FRAME_PLANE_STRIDE (&f, pl);
      im.strides[pl] = stride > 0 ? (size_t)stride : 0;
    }
    im.yuv = yuv_matrix_for (&f.info);
    const std::string bad = pi0::prep::validate (p, im);
    if (!bad.empty ()) {
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                         ("View '%s' (%dx%d %s) cannot be read: %s", v->name, im.width, im.height,
                          gst_video_format_to_string (vf), bad.c_str ()),
                         (NULL));
      return GST_FLOW_ERROR;
    }
    masks[i] = TRUE;
  }

  const size_t nbytes = pi0::prep::view_bytes (p) * n;
  GstPi0TensorStorage *storage = nullptr;
  gpointer ready_event = nullptr;
#ifdef HAVE_CUDA
  if (st.use_cuda) {
    cudaError_t err;
    const char *what = "";
    pi0::prep::BlockPool::Block *blk =
        st.cuda->runner.run (p, imgs.data (), in_device, (int)n, &err, &what);
    if (!blk) {
      GST_ELEMENT_ERROR (
          self, RESOURCE, FAILED,
          ("CUDA error while %s: %s", what, pi0::prep::cuda_error_text (err).c_str ()), (NULL));
      return GST_FLOW_ERROR;
    }
    ready_event = blk->event;
    storage = gst_pi0_tensor_storage_new (blk->data, nbytes, GST_PI0_DEVICE_CUDA, st.cuda->device,
                                          blk, pi0::prep::BlockPool::release);
  }
#endif
  if (!storage) {
    pi0::prep::BlockPool::Block *blk = st.host_pool->acquire (nbytes);
    if (!blk) {
      GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
                         ("Could not allocate %" G_GSIZE_FORMAT " bytes for the tensor", nbytes),
                         (NULL));
      return GST_FLOW_ERROR;
    }
    pi0::prep::prep_cpu (p, imgs.data (), (int)n, blk->data, st.threads.get ());
    storage = gst_pi0_tensor_storage_new (blk->data, nbytes, GST_PI0_DEVICE_CPU, 0, blk,
                                          pi0::prep::BlockPool::release);
  }

  /* An upstream tensor (a second cudaprep, say) would be ambiguous: ours replaces it. */
  while (GstPi0TensorMeta *old = gst_buffer_get_pi0_tensor_meta (buf))
    gst_buffer_remove_meta (buf, &old->meta);
  const gint64 shape[4] = {(gint64)n, 3, p.out_height, p.out_width};
  GstPi0TensorMeta *tm =
      gst_buffer_add_pi0_tensor_meta (buf, storage, (GstPi0DType)p.dtype, 4, shape);
  gst_pi0_tensor_storage_unref (storage);
  if (!tm) {
    GST_ELEMENT_ERROR (self, CORE, FAILED, ("Could not attach the tensor meta"), (NULL));
    return GST_FLOW_ERROR;
  }
  gst_pi0_tensor_meta_set_masks (tm, masks, n);
  tm->ready_event = ready_event;
  tm->prepared_time = gst_element_get_current_running_time (GST_ELEMENT (self));
  GST_LOG_OBJECT (self, "observation %" G_GUINT64_FORMAT ": [%u,3,%d,%d] %s on %s", meta->sequence,
                  n, p.out_height, p.out_width, gst_pi0_dtype_to_string ((GstPi0DType)p.dtype),
                  st.use_cuda ? "CUDA" : "CPU");
  return GST_FLOW_OK;
}

/* ---- context sharing (gst.cuda.context) ---- */

static void
gst_pi0_cuda_prep_set_context (GstElement *element, GstContext *context)
{
#ifdef HAVE_GST_CUDA
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (element);
  int id;
  {
    std::lock_guard<std::mutex> lk (self->priv->settings_lock);
    id = self->priv->settings.cuda_device_id;
  }
  gst_cuda_handle_set_context (element, context, id, &self->priv->gst_context);
#endif
  GST_ELEMENT_CLASS (parent_class)->set_context (element, context);
}

static gboolean
gst_pi0_cuda_prep_query (GstBaseTransform *bt, GstPadDirection direction, GstQuery *query)
{
#ifdef HAVE_GST_CUDA
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (bt);
  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT &&
      gst_cuda_handle_context_query (GST_ELEMENT (bt), query, self->priv->gst_context))
    return TRUE;
#endif
  return GST_BASE_TRANSFORM_CLASS (parent_class)->query (bt, direction, query);
}

/* Keep every meta on the buffer: ours, the observation meta and any the application added. */
static gboolean
gst_pi0_cuda_prep_transform_meta (GstBaseTransform *, GstBuffer *, GstMeta *, GstBuffer *)
{
  return TRUE;
}

/* ---- GObject ---- */

static void
gst_pi0_cuda_prep_finalize (GObject *object)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (object);
#ifdef HAVE_GST_CUDA
  gst_clear_object (&self->priv->gst_context);
#endif
  delete self->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_cuda_prep_init (GstPi0CudaPrep *self)
{
  self->priv = new GstPi0CudaPrepPrivate ();
  /* The views pass through; only a meta is added. */
  gst_base_transform_set_in_place (GST_BASE_TRANSFORM (self), TRUE);
  gst_base_transform_set_passthrough (GST_BASE_TRANSFORM (self), FALSE);
}

static void
gst_pi0_cuda_prep_class_init (GstPi0CudaPrepClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseTransformClass *bt_class = GST_BASE_TRANSFORM_CLASS (klass);

  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_finalize);
  const Settings d; /* every default: Settings' initialisers */

  /**
   * GstPi0CudaPrep:width:
   *
   * Width of the model input, in pixels. Taken at each observation.
   */
  g_object_class_install_property (gobject_class, PROP_WIDTH,
                                   g_param_spec_int ("width", "Width",
                                                     "Width of the model input, in pixels", 1, 8192,
                                                     d.width, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:height:
   *
   * Height of the model input, in pixels. Taken at each observation.
   */
  g_object_class_install_property (gobject_class, PROP_HEIGHT,
                                   g_param_spec_int ("height", "Height",
                                                     "Height of the model input, in pixels", 1,
                                                     8192, d.height, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:resize:
   *
   * How a view's aspect ratio is reconciled with the output's: `pad` is openpi's
   * resize-with-pad (what Pi0 checkpoints were trained with).
   */
  g_object_class_install_property (
      gobject_class, PROP_RESIZE,
      g_param_spec_enum ("resize", "Resize",
                         "How the view's aspect ratio is kept: pad (openpi), "
                         "stretch or crop",
                         gst_pi0_cuda_prep_resize_get_type (), d.resize,
                         GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:filter:
   *
   * The resampling filter: `antialias` is openpi's PIL bilinear filter, computed vertical pass
   * first (within one uint8 level of openpi, about 90% of values identical); `pil` follows
   * PIL's pass order too (bit-identical to openpi on landscape frames, ~10x slower on the CPU);
   * `bilinear` matches LeRobot's torch interpolate.
   */
  g_object_class_install_property (
      gobject_class, PROP_FILTER,
      g_param_spec_enum ("filter", "Filter",
                         "Resampling filter: antialias (PIL bilinear, openpi, "
                         "within 1 uint8 level), pil (bit-identical to PIL) or bilinear (torch "
                         "interpolate, no antialias)",
                         gst_pi0_cuda_prep_filter_get_type (), d.filter,
                         GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:normalize:
   *
   * Normalization of the 0..255 values: pi0 gives [-1, 1], bit-identical to openpi's float32
   * x / 255 * 2 - 1. Every mode computes (x / 255 - mean) / std in float32, in that order.
   */
  g_object_class_install_property (
      gobject_class, PROP_NORMALIZE,
      g_param_spec_enum ("normalize", "Normalize",
                         "Value normalization: pi0 (x/255*2-1, as openpi), "
                         "imagenet, or custom (the mean and std properties)",
                         gst_pi0_cuda_prep_normalize_get_type (), d.normalize,
                         GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:mean:
   *
   * Per-channel (R, G, B) mean in [0, 1] units, used with normalize=custom.
   */
  g_object_class_install_property (
      gobject_class, PROP_MEAN,
      gst_param_spec_array ("mean", "Mean",
                            "Per-channel R,G,B mean in [0,1] units (normalize="
                            "custom): out = (x/255 - mean) / std",
                            g_param_spec_float ("mean-value", "Mean value", "One channel's mean",
                                                -G_MAXFLOAT, G_MAXFLOAT, d.mean[0], GST_PI0_PARAM_PLAYING),
                            GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:std:
   *
   * Per-channel (R, G, B) standard deviation in [0, 1] units, used with normalize=custom.
   */
  g_object_class_install_property (
      gobject_class, PROP_STD,
      gst_param_spec_array ("std", "Std",
                            "Per-channel R,G,B standard deviation in [0,1] units, "
                            "> 0 (normalize=custom)",
                            g_param_spec_float ("std-value", "Std value", "One channel's std", 0.f,
                                                G_MAXFLOAT, d.std[0], GST_PI0_PARAM_PLAYING),
                            GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:dtype:
   *
   * Element type of the tensor.
   */
  g_object_class_install_property (gobject_class, PROP_DTYPE,
                                   g_param_spec_enum ("dtype", "DType",
                                                      "Element type of the model input tensor",
                                                      GST_TYPE_PI0_DTYPE, d.dtype,
                                                      GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0CudaPrep:device:
   *
   * Where the work runs. `auto` falls back to the CPU (said once at INFO); `cuda` fails to
   * start without a usable device.
   */
  g_object_class_install_property (
      gobject_class, PROP_DEVICE,
      g_param_spec_enum ("device", "Device",
                         "Where to compute: auto (CUDA if usable, else CPU), "
                         "cuda or cpu",
                         GST_TYPE_PI0_DEVICE, d.device,
                         GST_PI0_PARAM_READY));
  /**
   * GstPi0CudaPrep:cuda-device-id:
   *
   * The CUDA device the work runs on. -1, auto: device 0 (as pi0infer's auto, so that the
   * tensor is where the policy runs). Frames in CUDA memory are read in place when they are in
   * that device's primary context (which cudaprep shares as gst.cuda.context), through the
   * host otherwise.
   */
  g_object_class_install_property (
      gobject_class, PROP_CUDA_DEVICE_ID,
      g_param_spec_int ("cuda-device-id", "CUDA device id",
                        "CUDA device ordinal (-1 = auto: device 0, as pi0infer's auto)", -1,
                        G_MAXINT, d.cuda_device_id, GST_PI0_PARAM_READY));
  /**
   * GstPi0CudaPrep:n-threads:
   *
   * Threads of the CPU path; 0 uses one per CPU core.
   */
  g_object_class_install_property (gobject_class, PROP_N_THREADS,
                                   g_param_spec_uint ("n-threads", "Threads",
                                                      "Threads for the CPU path, in threads "
                                                      "(0 = one per CPU core)",
                                                      0, 256, d.n_threads, GST_PI0_PARAM_READY));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 view preprocessing", "Filter/Converter/Video/Scaler",
      "Resizes, pads and normalizes every view of a Pi0 observation into the model input "
      "tensor (CUDA, or multi-threaded CPU)",
      GST_PI0_AUTHOR);
  element_class->set_context = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_set_context);

  bt_class->start = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_start);
  bt_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_stop);
  bt_class->transform_ip = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_transform_ip);
  bt_class->transform_meta = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_transform_meta);
  bt_class->query = GST_DEBUG_FUNCPTR (gst_pi0_cuda_prep_query);
  bt_class->passthrough_on_same_caps = FALSE;

  gst_type_mark_as_plugin_api (gst_pi0_cuda_prep_resize_get_type (), (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (gst_pi0_cuda_prep_filter_get_type (), (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (gst_pi0_cuda_prep_normalize_get_type (), (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_DEVICE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_DTYPE, (GstPluginAPIFlags)0);
}
