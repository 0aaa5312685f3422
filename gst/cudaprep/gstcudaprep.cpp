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

/* Threads and locks: settings_lock guards Settings (properties) and is only held to copy them;
 * State belongs to the streaming thread (and start/stop, which GstBaseTransform serialises with
 * it). Output blocks go back to their pool from whatever thread drops the last buffer reference;
 * the pool has its own lock, taken last. Lock order: settings_lock, then a pool's lock. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cudaprep/gstcudaprep.h"
#include "common/gstpi0enum.h"
#include "common/gstpi0props.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include "pi0prep.h"
#ifdef HAVE_CUDA
#include "pi0prep_cuda.h"
#include <dlfcn.h>
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

constexpr int kDefaultSize = 224;
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

struct Settings {
  int width = kDefaultSize, height = kDefaultSize;
  GstPi0CudaPrepResize resize = GST_PI0_CUDA_PREP_RESIZE_PAD;
  GstPi0CudaPrepFilter filter = GST_PI0_CUDA_PREP_FILTER_ANTIALIAS;
  GstPi0CudaPrepNormalize normalize = GST_PI0_CUDA_PREP_NORMALIZE_PI0;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  GstPi0CudaPrepDType dtype = GST_PI0_CUDA_PREP_DTYPE_FLOAT32;
  GstPi0CudaPrepDevice device = GST_PI0_CUDA_PREP_DEVICE_AUTO;
  int cuda_device_id = -1;
  guint n_threads = 0;
};

/* A pool of equally sized output blocks (host or device). Blocks outlive the element when a
 * buffer does, so each one keeps the pool alive through a shared_ptr. */
struct BlockPool {
  std::mutex lock;
  size_t size = 0;
  bool closed = false;
  std::vector<void *> free_blocks;
  void *(*alloc) (size_t) = nullptr;
  void (*release) (void *) = nullptr;

  ~BlockPool ()
  {
    for (void *b : free_blocks)
      release (b);
  }
};

struct Block {
  std::shared_ptr<BlockPool> pool;
  void *data = nullptr;
  size_t size = 0;
#ifdef HAVE_CUDA
  cudaEvent_t event = nullptr; /* recorded when the block is written (device blocks) */
#endif
};

void
block_return (gpointer user_data)
{
  Block *b = static_cast<Block *> (user_data);
  {
    std::lock_guard<std::mutex> lk (b->pool->lock);
    if (!b->pool->closed && b->size == b->pool->size) {
      b->pool->free_blocks.push_back (b->data);
      b->data = nullptr;
    }
  }
  if (b->data)
    b->pool->release (b->data);
#ifdef HAVE_CUDA
  if (b->event)
    cudaEventDestroy (b->event);
#endif
  delete b;
}

Block *
block_acquire (const std::shared_ptr<BlockPool> &pool, size_t size)
{
  void *data = nullptr;
  {
    std::lock_guard<std::mutex> lk (pool->lock);
    if (pool->size != size) {
      /* New geometry or dtype: the old blocks are freed as they come back. */
      for (void *b : pool->free_blocks)
        pool->release (b);
      pool->free_blocks.clear ();
      pool->size = size;
    }
    if (!pool->free_blocks.empty ()) {
      data = pool->free_blocks.back ();
      pool->free_blocks.pop_back ();
    }
  }
  if (!data)
    data = pool->alloc (size);
  if (!data)
    return nullptr;
  Block *b = new Block;
  b->pool = pool;
  b->data = data;
  b->size = size;
  return b;
}

void *
host_alloc (size_t n)
{
  /* 64-byte aligned so rows of the output can be stored with full vectors. */
  return std::aligned_alloc (64, (n + 63) / 64 * 64);
}

void
host_release (void *p)
{
  std::free (p);
}

#ifdef HAVE_CUDA
void *
device_alloc (size_t n)
{
  void *p = nullptr;
  return cudaMalloc (&p, n) == cudaSuccess ? p : nullptr;
}

void
device_release (void *p)
{
  cudaFree (p);
}

/* The driver API entry points we need, found at run time so the plugin loads (and runs on
 * the CPU) where there is no driver. */
struct DriverApi {
  int (*primary_retain) (void **ctx, int dev) = nullptr;
  int (*primary_release) (int dev) = nullptr;
  bool ok = false;

  static const DriverApi &get ()
  {
    static DriverApi api;
    static std::once_flag once;
    std::call_once (once, [] {
      void *lib = dlopen ("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib)
        return;
      api.primary_retain =
          reinterpret_cast<int (*) (void **, int)> (dlsym (lib, "cuDevicePrimaryCtxRetain"));
      api.primary_release =
          reinterpret_cast<int (*) (int)> (dlsym (lib, "cuDevicePrimaryCtxRelease_v2"));
      if (!api.primary_release)
        api.primary_release =
            reinterpret_cast<int (*) (int)> (dlsym (lib, "cuDevicePrimaryCtxRelease"));
      api.ok = api.primary_retain && api.primary_release;
    });
    return api;
  }
};

/* Per view: a stream, an event marking its work done, pinned staging and device input for
 * frames in system memory. */
struct CudaView {
  pi0::prep::CudaStream stream;
  pi0::prep::CudaEvent done;
  pi0::prep::CudaEvent upload_done; /* staging may be rewritten once this has fired */
  pi0::prep::PinnedBuffer staging;
  pi0::prep::DeviceBuffer input;
};

struct CudaState {
  int device = 0;
  void *primary_ctx = nullptr; /* retained CUcontext */
  std::unique_ptr<pi0::prep::CudaPrep> prep;
  std::vector<std::unique_ptr<CudaView>> views;
  std::shared_ptr<BlockPool> pool;
};
#endif

struct State {
  bool use_cuda = false;
  std::unique_ptr<pi0::prep::ThreadPool> threads;
  std::shared_ptr<BlockPool> host_pool;
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
  switch (f) {
    case GST_VIDEO_FORMAT_RGB:
      out = pi0::prep::Format::RGB;
      return true;
    case GST_VIDEO_FORMAT_BGR:
      out = pi0::prep::Format::BGR;
      return true;
    case GST_VIDEO_FORMAT_RGBx:
      out = pi0::prep::Format::RGBx;
      return true;
    case GST_VIDEO_FORMAT_BGRx:
      out = pi0::prep::Format::BGRx;
      return true;
    case GST_VIDEO_FORMAT_xRGB:
      out = pi0::prep::Format::xRGB;
      return true;
    case GST_VIDEO_FORMAT_xBGR:
      out = pi0::prep::Format::xBGR;
      return true;
    case GST_VIDEO_FORMAT_RGBA:
      out = pi0::prep::Format::RGBA;
      return true;
    case GST_VIDEO_FORMAT_BGRA:
      out = pi0::prep::Format::BGRA;
      return true;
    case GST_VIDEO_FORMAT_ARGB:
      out = pi0::prep::Format::ARGB;
      return true;
    case GST_VIDEO_FORMAT_ABGR:
      out = pi0::prep::Format::ABGR;
      return true;
    case GST_VIDEO_FORMAT_GRAY8:
      out = pi0::prep::Format::GRAY8;
      return true;
    case GST_VIDEO_FORMAT_NV12:
      out = pi0::prep::Format::NV12;
      return true;
    case GST_VIDEO_FORMAT_I420:
      out = pi0::prep::Format::I420;
      return true;
    case GST_VIDEO_FORMAT_NV21:
      out = pi0::prep::Format::NV21;
      return true;
    case GST_VIDEO_FORMAT_YV12:
      out = pi0::prep::Format::YV12;
      return true;
    case GST_VIDEO_FORMAT_Y42B:
      out = pi0::prep::Format::Y42B;
      return true;
    case GST_VIDEO_FORMAT_Y444:
      out = pi0::prep::Format::Y444;
      return true;
    case GST_VIDEO_FORMAT_YUY2:
      out = pi0::prep::Format::YUY2;
      return true;
    case GST_VIDEO_FORMAT_UYVY:
      out = pi0::prep::Format::UYVY;
      return true;
    default:
      return false;
  }
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
  p.dtype = s.dtype == GST_PI0_CUDA_PREP_DTYPE_FLOAT32    ? pi0::prep::DType::Float32
            : s.dtype == GST_PI0_CUDA_PREP_DTYPE_BFLOAT16 ? pi0::prep::DType::BFloat16
                                                          : pi0::prep::DType::Float16;
  return p;
}

GstPi0DType
to_meta_dtype (pi0::prep::DType d)
{
  return d == pi0::prep::DType::Float32    ? GST_PI0_DTYPE_FLOAT32
         : d == pi0::prep::DType::BFloat16 ? GST_PI0_DTYPE_BFLOAT16
                                           : GST_PI0_DTYPE_FLOAT16;
}

} // namespace

struct GstPi0CudaPrepPrivate {
  std::mutex settings_lock;
  Settings settings;
  State state;
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

#define PI0_CAPS                                                                                   \
  GST_PI0_OBSERVATION_MEDIA_TYPE "; " GST_PI0_OBSERVATION_MEDIA_TYPE "(memory:CUDAMemory)"

static GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (PI0_CAPS));
static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE ("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (PI0_CAPS));

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
GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_cuda_prep_device_get_type, "GstPi0CudaPrepDevice",
                          {GST_PI0_CUDA_PREP_DEVICE_AUTO, "CUDA when usable, else CPU", "auto"},
                          {GST_PI0_CUDA_PREP_DEVICE_CUDA, "CUDA (fail to start without a device)",
                           "cuda"},
                          {GST_PI0_CUDA_PREP_DEVICE_CPU, "CPU, multi-threaded", "cpu"})
GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_cuda_prep_dtype_get_type, "GstPi0CudaPrepDType",
                          {GST_PI0_CUDA_PREP_DTYPE_FLOAT32, "float32", "float32"},
                          {GST_PI0_CUDA_PREP_DTYPE_BFLOAT16, "bfloat16", "bfloat16"},
                          {GST_PI0_CUDA_PREP_DTYPE_FLOAT16, "float16", "float16"})

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
static void
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_FIELD (PROP_WIDTH, width, gint, int)
    GST_PI0_PROP_FIELD (PROP_HEIGHT, height, gint, int)
    GST_PI0_PROP_FIELD (PROP_RESIZE, resize, gint, enum)
    GST_PI0_PROP_FIELD (PROP_FILTER, filter, gint, enum)
    GST_PI0_PROP_FIELD (PROP_NORMALIZE, normalize, gint, enum)
    GST_PI0_PROP_FIELD (PROP_DTYPE, dtype, gint, enum)
    GST_PI0_PROP_FIELD (PROP_DEVICE, device, gint, enum)
    GST_PI0_PROP_FIELD (PROP_CUDA_DEVICE_ID, cuda_device_id, gint, int)
    GST_PI0_PROP_FIELD (PROP_N_THREADS, n_threads, guint, uint)
    case PROP_MEAN:
      if (set)
        set_float3 (value, s.mean);
      else
        get_float3 (value, s.mean);
      break;
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
      break;
  }
}

static void
gst_pi0_cuda_prep_set_property (GObject *object, guint prop_id, const GValue *value,
                                GParamSpec *pspec)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (object);
  if (prop_id == PROP_0 || prop_id > PROP_N_THREADS) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  transfer (self->priv->settings, prop_id, (GValue *)value, true);
}

static void
gst_pi0_cuda_prep_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0CudaPrep *self = GST_PI0_CUDA_PREP (object);
  if (prop_id == PROP_0 || prop_id > PROP_N_THREADS) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  transfer (self->priv->settings, prop_id, value, false);
}

/* ---- start / stop ---- */

#ifdef HAVE_CUDA
#define CUDA_TRY(self, call, what)                                                                 \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      GST_ELEMENT_ERROR (                                                                          \
          self, RESOURCE, FAILED,                                                                  \
          ("CUDA error while %s: %s", what, pi0::prep::cuda_error_text (err_).c_str ()),           \
          ("%s", #call));                                                                          \
      return false;                                                                                \
    }                                                                                              \
  } while (0)

static bool
cuda_start (GstPi0CudaPrep *self, int device)
{
  GstPi0CudaPrepPrivate *priv = self->priv;
  auto cs = std::make_unique<CudaState> ();
  cs->device = device;
  CUDA_TRY (self, cudaSetDevice (device), "selecting the device");
  /* cudart works in the device's primary context; keep it alive while we run and publish it,
   * so nvcodec elements allocate where our kernels (and LibTorch) can read in place. */
  const DriverApi &drv = DriverApi::get ();
  if (drv.ok && drv.primary_retain (&cs->primary_ctx, device) != 0)
    cs->primary_ctx = nullptr;
#ifdef HAVE_GST_CUDA
  if (!priv->gst_context && cs->primary_ctx && gst_cuda_load_library ()) {
    priv->gst_context = gst_cuda_context_new_wrapped ((CUcontext)cs->primary_ctx, device);
    if (priv->gst_context) {
      GstContext *ctx = gst_context_new_cuda_context (priv->gst_context);
      gst_element_post_message (GST_ELEMENT (self),
                                gst_message_new_have_context (GST_OBJECT (self), ctx));
    }
  }
#endif
  cs->prep = std::make_unique<pi0::prep::CudaPrep> (GST_PI0_MAX_VIEWS);
  for (int v = 0; v < GST_PI0_MAX_VIEWS; v++) {
    auto cv = std::make_unique<CudaView> ();
    CUDA_TRY (self, cv->stream.create (), "creating a stream");
    CUDA_TRY (self, cv->done.create (), "creating an event");
    CUDA_TRY (self, cv->upload_done.create (), "creating an event");
    cs->views.push_back (std::move (cv));
  }
  cs->pool = std::make_shared<BlockPool> ();
  cs->pool->alloc = device_alloc;
  cs->pool->release = device_release;
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

  if (s.device != GST_PI0_CUDA_PREP_DEVICE_CPU) {
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
      if (s.device == GST_PI0_CUDA_PREP_DEVICE_CUDA) {
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
  st.host_pool = std::make_shared<BlockPool> ();
  st.host_pool->alloc = host_alloc;
  st.host_pool->release = host_release;
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
  for (auto *pool : {st.host_pool.get ()
#ifdef HAVE_CUDA
                         ,
                     st.cuda ? st.cuda->pool.get () : nullptr
#endif
       }) {
    if (!pool)
      continue;
    std::lock_guard<std::mutex> lk (pool->lock);
    pool->closed = true;
  }
#ifdef HAVE_CUDA
  if (st.cuda) {
    for (auto &v : st.cuda->views)
      cudaStreamSynchronize (v->stream.get ());
    const int dev = st.cuda->device;
    void *ctx = st.cuda->primary_ctx;
    st.cuda.reset ();
    if (ctx)
      DriverApi::get ().primary_release (dev);
  }
#endif
  st = State ();
  return TRUE;
}

/* ---- the work ---- */

#ifdef HAVE_CUDA
/* Enqueues the views on their streams; returns the block holding the output (its event
 * recorded after every view), or nullptr after posting an error. */
static Block *
cuda_run (GstPi0CudaPrep *self, const pi0::prep::Params &p, std::vector<MappedView> &maps,
          const std::vector<pi0::prep::Image> &imgs, const std::vector<bool> &in_device)
{
  CudaState &cs = *self->priv->state.cuda;
  const int n = (int)imgs.size ();
  const size_t vb = pi0::prep::view_bytes (p);
  Block *blk = block_acquire (cs.pool, vb * n);
  auto fail = [&] (const char *what, cudaError_t err) -> Block * {
    GST_ELEMENT_ERROR (self, RESOURCE, FAILED,
                       ("CUDA error while %s: %s", what, pi0::prep::cuda_error_text (err).c_str ()),
                       (NULL));
    if (blk)
      block_return (blk);
    return nullptr;
  };
  if (!blk)
    return fail ("allocating the output", cudaErrorMemoryAllocation);
  cudaError_t err = cudaEventCreateWithFlags (&blk->event, cudaEventDisableTiming);
  if (err != cudaSuccess)
    return fail ("creating the output event", err);

  for (int v = 0; v < n; v++) {
    CudaView &cv = *cs.views[v];
    pi0::prep::Image im = imgs[v];
    if (im.planes[0] && !in_device[v]) {
      /* System memory: copy each plane into pinned staging and upload it on this view's
       * stream. The previous frame's upload must be done before staging is rewritten. */
      const GstVideoFrame &f = maps[v].frame;
      const int np = pi0::prep::format_n_planes (im.format);
      size_t offs[3], total = 0;
      for (int pl = 0; pl < np; pl++) {
        offs[pl] = total;
        total +=
            (pi0::prep::plane_span (im.format, im.height, pl, im.strides[pl]) + 255) / 256 * 256;
      }
      if ((err = cudaEventSynchronize (cv.upload_done.get ())) != cudaSuccess)
        return fail ("waiting for the previous upload", err);
      if ((err = cv.staging.ensure (total)) != cudaSuccess)
        return fail ("allocating pinned staging memory", err);
      if ((err = cv.input.ensure (total)) != cudaSuccess)
        return fail ("allocating device input memory", err);
      for (int pl = 0; pl < np; pl++) {
        std::memcpy (cv.staging.data () + offs[pl], GST_VIDEO_FRAME_PLANE_DATA (&f, pl),
                     pi0::prep::plane_span (im.format, im.height, pl, im.strides[pl]));
        im.planes[pl] = cv.input.data () + offs[pl];
      }
      if ((err = cudaMemcpyAsync (cv.input.data (), cv.staging.data (), total,
                                  cudaMemcpyHostToDevice, cv.stream.get ())) != cudaSuccess)
        return fail ("uploading a frame", err);
      if ((err = cudaEventRecord (cv.upload_done.get (), cv.stream.get ())) != cudaSuccess)
        return fail ("recording an event", err);
    }
    if ((err = cs.prep->run_view (p, v, im, static_cast<uint8_t *> (blk->data) + v * vb,
                                  cv.stream.get ())) != cudaSuccess)
      return fail ("running the preprocessing kernel", err);
    if ((err = cudaEventRecord (cv.done.get (), cv.stream.get ())) != cudaSuccess)
      return fail ("recording an event", err);
  }
  /* One event for the whole tensor: view 0's stream waits for the others on the GPU. */
  cudaStream_t s0 = cs.views[0]->stream.get ();
  for (int v = 1; v < n; v++)
    if ((err = cudaStreamWaitEvent (s0, cs.views[v]->done.get (), 0)) != cudaSuccess)
      return fail ("joining the view streams", err);
  if ((err = cudaEventRecord (blk->event, s0)) != cudaSuccess)
    return fail ("recording the output event", err);
  return blk;
}
#endif

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
  std::vector<bool> in_device (n, false);
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
                         ("supported: RGB, BGR, RGBx, BGRx, xRGB, xBGR, RGBA, BGRA, ARGB, ABGR, "
                          "GRAY8, NV12, NV21, I420, YV12, Y42B, Y444, YUY2, UYVY"));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    GstMapFlags flags = GST_MAP_READ;
#ifdef HAVE_GST_CUDA
    if (st.use_cuda && v->n_mem > 0 && v->mem_index < gst_buffer_n_memory (buf)) {
      GstMemory *mem = gst_buffer_peek_memory (buf, v->mem_index);
      if (gst_is_cuda_memory (mem) && st.cuda->primary_ctx &&
          gst_cuda_context_get_handle (GST_CUDA_MEMORY_CAST (mem)->context) ==
              st.cuda->primary_ctx) {
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
    Block *blk = cuda_run (self, p, maps, imgs, in_device);
    if (!blk)
      return GST_FLOW_ERROR;
    ready_event = blk->event;
    storage = gst_pi0_tensor_storage_new (blk->data, nbytes, GST_PI0_DEVICE_CUDA, st.cuda->device,
                                          blk, block_return);
  }
#endif
  if (!storage) {
    Block *blk = block_acquire (st.host_pool, nbytes);
    if (!blk) {
      GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
                         ("Could not allocate %" G_GSIZE_FORMAT " bytes for the tensor", nbytes),
                         (NULL));
      return GST_FLOW_ERROR;
    }
    pi0::prep::prep_cpu (p, imgs.data (), (int)n, blk->data, st.threads.get ());
    storage =
        gst_pi0_tensor_storage_new (blk->data, nbytes, GST_PI0_DEVICE_CPU, 0, blk, block_return);
  }

  /* An upstream tensor (a second cudaprep, say) would be ambiguous: ours replaces it. */
  while (GstPi0TensorMeta *old = gst_buffer_get_pi0_tensor_meta (buf))
    gst_buffer_remove_meta (buf, &old->meta);
  const gint64 shape[4] = {(gint64)n, 3, p.out_height, p.out_width};
  GstPi0TensorMeta *tm =
      gst_buffer_add_pi0_tensor_meta (buf, storage, to_meta_dtype (p.dtype), 4, shape);
  gst_pi0_tensor_storage_unref (storage);
  if (!tm) {
    GST_ELEMENT_ERROR (self, CORE, FAILED, ("Could not attach the tensor meta"), (NULL));
    return GST_FLOW_ERROR;
  }
  gst_pi0_tensor_meta_set_masks (tm, masks, n);
  tm->ready_event = ready_event;
  tm->prepared_time = gst_pi0_element_get_running_time (GST_ELEMENT (self));
  GST_LOG_OBJECT (self, "observation %" G_GUINT64_FORMAT ": [%u,3,%d,%d] %s on %s", meta->sequence,
                  n, p.out_height, p.out_width, gst_pi0_dtype_to_string (to_meta_dtype (p.dtype)),
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
  const GParamFlags rw = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  const GParamFlags playing = (GParamFlags)(rw | GST_PARAM_MUTABLE_PLAYING);
  const GParamFlags ready = (GParamFlags)(rw | GST_PARAM_MUTABLE_READY);

  gobject_class->set_property = gst_pi0_cuda_prep_set_property;
  gobject_class->get_property = gst_pi0_cuda_prep_get_property;
  gobject_class->finalize = gst_pi0_cuda_prep_finalize;

  /**
   * GstPi0CudaPrep:width:
   *
   * Width of the model input, in pixels. Taken at each observation.
   */
  g_object_class_install_property (gobject_class, PROP_WIDTH,
                                   g_param_spec_int ("width", "Width",
                                                     "Width of the model input, in pixels", 1, 8192,
                                                     kDefaultSize, playing));
  /**
   * GstPi0CudaPrep:height:
   *
   * Height of the model input, in pixels. Taken at each observation.
   */
  g_object_class_install_property (gobject_class, PROP_HEIGHT,
                                   g_param_spec_int ("height", "Height",
                                                     "Height of the model input, in pixels", 1,
                                                     8192, kDefaultSize, playing));
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
                         gst_pi0_cuda_prep_resize_get_type (), GST_PI0_CUDA_PREP_RESIZE_PAD,
                         playing));
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
                         gst_pi0_cuda_prep_filter_get_type (), GST_PI0_CUDA_PREP_FILTER_ANTIALIAS,
                         playing));
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
                         gst_pi0_cuda_prep_normalize_get_type (), GST_PI0_CUDA_PREP_NORMALIZE_PI0,
                         playing));
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
                                                -G_MAXFLOAT, G_MAXFLOAT, 0.5f, rw),
                            playing));
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
                                                G_MAXFLOAT, 0.5f, rw),
                            playing));
  /**
   * GstPi0CudaPrep:dtype:
   *
   * Element type of the tensor.
   */
  g_object_class_install_property (gobject_class, PROP_DTYPE,
                                   g_param_spec_enum ("dtype", "DType",
                                                      "Element type of the model input tensor",
                                                      gst_pi0_cuda_prep_dtype_get_type (),
                                                      GST_PI0_CUDA_PREP_DTYPE_FLOAT32, playing));
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
                         gst_pi0_cuda_prep_device_get_type (), GST_PI0_CUDA_PREP_DEVICE_AUTO,
                         ready));
  /**
   * GstPi0CudaPrep:cuda-device-id:
   *
   * CUDA device ordinal; -1 picks device 0 or the one of a shared gst.cuda.context.
   */
  g_object_class_install_property (
      gobject_class, PROP_CUDA_DEVICE_ID,
      g_param_spec_int ("cuda-device-id", "CUDA device id",
                        "CUDA device ordinal (-1 = the first, or the shared context's)", -1,
                        G_MAXINT, -1, ready));
  /**
   * GstPi0CudaPrep:n-threads:
   *
   * Threads of the CPU path; 0 uses one per CPU core.
   */
  g_object_class_install_property (gobject_class, PROP_N_THREADS,
                                   g_param_spec_uint ("n-threads", "Threads",
                                                      "Threads for the CPU path, in threads "
                                                      "(0 = one per CPU core)",
                                                      0, 256, 0, ready));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 view preprocessing", "Filter/Converter/Video/Scaler",
      "Resizes, pads and normalizes every view of a Pi0 observation into the model input "
      "tensor (CUDA, or multi-threaded CPU)",
      "gst-pi0 developers");
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
  gst_type_mark_as_plugin_api (gst_pi0_cuda_prep_device_get_type (), (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (gst_pi0_cuda_prep_dtype_get_type (), (GstPluginAPIFlags)0);
}
