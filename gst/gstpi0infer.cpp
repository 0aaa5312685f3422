/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0infer
 * @title: pi0infer
 *
 * Runs a Pi0 policy on each observation and attaches the action chunk as a
 * #GstPi0ActionMeta, in the robot's units (unnormalized with the policy's norm stats) and
 * native dimensions, with the observation's sequence number and capture time, the inference
 * time and the model's id. The buffer itself passes through untouched.
 *
 * It reads the model input from the #GstPi0TensorMeta that `cudaprep` adds, the robot state
 * from the #GstPi0ObservationMeta, and the instruction from the #GstPi0Infer:instruction
 * property or from a `pi0-instruction` event in the stream (gst_pi0_instruction_event_new()),
 * which switches tasks at an exact observation. An instruction is tokenized once, not per
 * frame.
 *
 * There is no default model: without #GstPi0Infer:model the element refuses to start and
 * says what to set. `model=builtin:pi0-tiny` is a small seeded demo model with random weights:
 * its actions mean nothing and carry %GST_PI0_ACTION_FLAG_UNTRAINED. `model=builtin:pi0` is
 * the full-size architecture (3.2 B parameters) with seeded random weights, for measuring
 * speed and memory without a checkpoint (it needs about 13 GB of host memory to build).
 *
 * When the cameras outrun the model, put a leaky one-buffer queue in front
 * (`queue max-size-buffers=1 leaky=downstream`) so that each inference takes the newest
 * observation instead of working through a backlog. The element answers the LATENCY query
 * with its measured inference time.
 *
 * Observations whose robot state is missing or older than the muxer's `max-state-age` get no
 * actions while #GstPi0Infer:require-state is set (the default): the policy never runs on a
 * state it does not have.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0viewmux name=mux ! cudaprep width=32 height=32 ! \
 *   pi0infer model=builtin:pi0-tiny instruction="pick up the cube" require-state=false ! \
 *   fakesink silent=false -v \
 *   videotestsrc num-buffers=30 ! video/x-raw,width=320,height=240,framerate=30/1 ! mux.main \
 *   videotestsrc num-buffers=15 pattern=ball ! video/x-raw,width=160,height=120,framerate=15/1 ! mux.side
 * ]|
 *
 * Since: 0.1
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0infer.h"
#include "gstpi0enum.h"
#include "pi0percentile.h"

#include <gst/pi0/pi0.h>

#include "model/open_policy.h"
#include "model/rtc_tracker.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_infer_debug);
#define GST_CAT_DEFAULT gst_pi0_infer_debug

/* Locking: settings_lock guards Settings; stats_lock guards Stats. They are never held
 * together, and neither is held while loading the model, running inference or posting. The
 * opened policy and State belong to the streaming thread between start() and stop(). The
 * real-time chunking tracker locks itself.
 *
 * Everything about the policy (which backend, checkpoint, tokenizer, norm stats, device, CUDA
 * stream) is inference/'s pi0::open_policy(), and what real-time chunking keeps and decides (the
 * chunks made, the sink's feedback, the guidance) its pi0::RtcTracker; this file is the
 * GStreamer side only. */

#define DEFAULT_NUM_STEPS 10
#define DEFAULT_PRECISION GST_PI0_INFER_PRECISION_AUTO
#define DEFAULT_DEVICE GST_PI0_INFER_DEVICE_AUTO
#define DEFAULT_NORM_MODE NORM_ZSCORE
#define LATENCY_WINDOW 200
#define DEFAULT_RTC GST_PI0_INFER_RTC_OFF
#define DEFAULT_RTC_MAX_GUIDANCE_WEIGHT 5.0
#define DEFAULT_MAX_BATCH_SIZE 1
#define DEFAULT_MAX_BATCH_WAIT (5 * GST_MSECOND)

enum {
  PROP_0,
  PROP_MODEL,
  PROP_TOKENIZER,
  PROP_INSTRUCTION,
  PROP_NORM_STATS,
  PROP_NORM_MODE,
  PROP_ACTION_DIMS,
  PROP_NUM_STEPS,
  PROP_PRECISION,
  PROP_DEVICE,
  PROP_CUDA_DEVICE_ID,
  PROP_SEED,
  PROP_REQUIRE_STATE,
  PROP_RTC,
  PROP_RTC_EXECUTION_HORIZON,
  PROP_RTC_MAX_GUIDANCE_WEIGHT,
  PROP_MAX_BATCH_SIZE,
  PROP_MAX_BATCH_WAIT,
  PROP_MODEL_ID,
  PROP_STATS,
};

typedef enum { NORM_ZSCORE = 0, NORM_QUANTILE = 1 } GstPi0InferNormMode;

#define CAPS                                                                                       \
  GST_PI0_OBSERVATION_MEDIA_TYPE "; " GST_PI0_OBSERVATION_MEDIA_TYPE "(memory:CUDAMemory)"
static GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (CAPS));
static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE ("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (CAPS));

struct Settings {
  std::string model;
  std::string tokenizer;
  std::string instruction;
  std::string norm_stats;
  GstPi0InferNormMode norm_mode = DEFAULT_NORM_MODE;
  int action_dims = 0;
  int num_steps = DEFAULT_NUM_STEPS;
  GstPi0InferPrecision precision = DEFAULT_PRECISION;
  GstPi0InferDevice device = DEFAULT_DEVICE;
  int cuda_device_id = 0;
  guint64 seed = 0;
  bool require_state = true;
  GstPi0InferRtc rtc = DEFAULT_RTC;
  guint rtc_execution_horizon = 0; /* 0: the rows already due when the observation was taken */
  double rtc_max_guidance_weight = DEFAULT_RTC_MAX_GUIDANCE_WEIGHT;
  guint max_batch_size = DEFAULT_MAX_BATCH_SIZE;
  guint64 max_batch_wait = DEFAULT_MAX_BATCH_WAIT;
};

struct Stats {
  guint64 observations = 0; /* buffers seen */
  guint64 chunks = 0;       /* action metas attached */
  guint64 skipped_state = 0;
  guint64 non_finite = 0;
  guint64 errors = 0;
  std::string last_error;
  std::deque<double> latencies_ms; /* the last LATENCY_WINDOW inferences */
  double total_ms = 0;             /* all inferences since start: busy time */
  double warmup_ms = 0;
  guint64 rtc_guided = 0;           /* chunks sampled with guidance */
  guint64 rtc_feedback = 0;         /* pi0-executing events taken */
  guint64 rtc_feedback_ignored = 0; /* pi0-executing events refused (a warning says why) */
  guint64 rtc_delay = 0;            /* delay in rows of the last guided chunk */
  guint64 rtc_prefix_rows = 0;      /* rows of the executing chunk it was guided toward */
  guint64 passes = 0;               /* policy calls: one per observation, or per batch */
};

/* The tracker takes the pipeline's running times as they are. */
static_assert (pi0::RtcTracker::kTimeNone == GST_CLOCK_TIME_NONE, "one 'no time' for both");

struct State {
  bool warned_no_state = false;
  bool warned_truncated = false;
  bool warned_rtc_unsupported = false;
};

/* One observation ready to run (or to pass on without actions), or, while batching, an
 * instruction event held so that it stays between the same buffers downstream. */
struct Prepared {
  GstBuffer *buf = nullptr; /* held while batching (owned); else the buffer in transform_ip */
  GstEvent *event = nullptr;
  bool infer = false; /* false: passes on without actions (no state) */
  bool done = false;  /* its chunk is attached */
  pi0::Request rq;
  bool guided = false;
  guint64 sequence = 0;
  GstClockTime observation_time = GST_CLOCK_TIME_NONE;
  std::string instruction;
};

/* Batching (max-batch-size > 1): observations held until max-batch-size of them need the policy,
 * max-batch-wait has passed since the first, or a serialized event (EOS, segment, caps...)
 * comes; then they run as one forward pass and are pushed in input order. `held` belongs to
 * whoever holds the sink pad's stream lock (the streaming thread, or the wait thread when the
 * wait ends); `lock` guards the rest, shared with the wait thread. */
struct Batching {
  guint size = 1; /* max-batch-size, fixed at start() */
  std::deque<Prepared> held;
  guint n_infer = 0; /* held observations that need the policy */
  std::mutex lock;
  std::condition_variable cond;
  bool armed = false; /* a wait runs until `deadline` on `clock` */
  bool stopping = false;
  guint64 generation = 0; /* bumped whenever `held` is run or dropped */
  GstClock *clock = nullptr;
  GstClockTime deadline = GST_CLOCK_TIME_NONE;
  GstClockID wait_id = nullptr;
  std::thread waiter;
};

struct GstPi0InferPrivate {
  std::mutex settings_lock;
  Settings settings;
  std::mutex stats_lock;
  Stats stats;
  std::string model_id; /* under stats_lock: readable while running */
  std::unique_ptr<pi0::OpenedPolicy> policy;
  State state;
  pi0::RtcTracker rtc; /* real-time chunking; its own lock (upstream events, transform_ip) */
  Batching batch;
};

struct _GstPi0Infer {
  GstBaseTransform parent;
  GstPi0InferPrivate *priv;
};

#define gst_pi0_infer_parent_class parent_class
G_DEFINE_TYPE (GstPi0Infer, gst_pi0_infer, GST_TYPE_BASE_TRANSFORM);
GST_ELEMENT_REGISTER_DEFINE (pi0infer, "pi0infer", GST_RANK_NONE, GST_TYPE_PI0_INFER);

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_infer_precision_get_type, "GstPi0InferPrecision",
                          {GST_PI0_INFER_PRECISION_AUTO, "bf16 on CUDA, fp32 on the CPU", "auto"},
                          {GST_PI0_INFER_PRECISION_BF16, "bf16 weights, fp32 norms and softmax",
                           "bf16"},
                          {GST_PI0_INFER_PRECISION_FP32, "fp32", "fp32"})

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_infer_device_get_type, "GstPi0InferDevice",
                          {GST_PI0_INFER_DEVICE_AUTO, "CUDA when usable, else the CPU", "auto"},
                          {GST_PI0_INFER_DEVICE_CUDA, "CUDA (fails to start without a usable GPU)",
                           "cuda"},
                          {GST_PI0_INFER_DEVICE_CPU, "The CPU", "cpu"})

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_infer_norm_mode_get_type, "GstPi0InferNormMode",
                          {NORM_ZSCORE, "(x - mean) / (std + 1e-6), as pi0 trains", "zscore"},
                          {NORM_QUANTILE, "[q01, q99] to [-1, 1], as pi05 and pi0-FAST train",
                           "quantile"})

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_infer_rtc_get_type, "GstPi0InferRtc",
    {GST_PI0_INFER_RTC_OFF, "Each chunk from fresh noise alone", "off"},
    {GST_PI0_INFER_RTC_GUIDED,
     "Real-time chunking: guide each chunk toward the rest of the executing one (the paper's "
     "vector-Jacobian product)",
     "guided"},
    {GST_PI0_INFER_RTC_GUIDED_IDENTITY,
     "Real-time chunking with J = I (LeRobot's form: no backward pass)", "guided-identity"})

static void gst_pi0_infer_finalize (GObject *object);
static void gst_pi0_infer_set_property (GObject *object, guint prop_id, const GValue *value,
                                        GParamSpec *pspec);
static void gst_pi0_infer_get_property (GObject *object, guint prop_id, GValue *value,
                                        GParamSpec *pspec);
static gboolean gst_pi0_infer_start (GstBaseTransform *trans);
static gboolean gst_pi0_infer_stop (GstBaseTransform *trans);
static gboolean gst_pi0_infer_set_caps (GstBaseTransform *trans, GstCaps *incaps, GstCaps *outcaps);
static gboolean gst_pi0_infer_sink_event (GstBaseTransform *trans, GstEvent *event);
static gboolean gst_pi0_infer_src_event (GstBaseTransform *trans, GstEvent *event);
static gboolean gst_pi0_infer_query (GstBaseTransform *trans, GstPadDirection direction,
                                     GstQuery *query);
static GstFlowReturn gst_pi0_infer_transform_ip (GstBaseTransform *trans, GstBuffer *buf);
static GstFlowReturn gst_pi0_infer_submit_input_buffer (GstBaseTransform *trans,
                                                        gboolean is_discont, GstBuffer *buf);
static GstFlowReturn gst_pi0_infer_generate_output (GstBaseTransform *trans, GstBuffer **outbuf);
static void batch_start (GstPi0Infer *self, guint size);
static void batch_stop (GstPi0Infer *self);
static GstFlowReturn run_held (GstPi0Infer *self);
static std::deque<Prepared> take_held (GstPi0Infer *self);
static void unref_items (std::deque<Prepared> &items);

static void
gst_pi0_infer_class_init (GstPi0InferClass *klass)
{
  auto gobject_class = G_OBJECT_CLASS (klass);
  auto element_class = GST_ELEMENT_CLASS (klass);
  auto bt_class = GST_BASE_TRANSFORM_CLASS (klass);
  const auto rw_ready =
      (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  const auto rw_playing =
      (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);

  gobject_class->finalize = gst_pi0_infer_finalize;
  gobject_class->set_property = gst_pi0_infer_set_property;
  gobject_class->get_property = gst_pi0_infer_get_property;

  /**
   * GstPi0Infer:model:
   *
   * The policy: a checkpoint directory (config.json + model.safetensors, openpi-PyTorch or
   * LeRobot layout), a model.safetensors file, a TorchScript file (.pt, .ts, .torchscript), or
   * `builtin:pi0-tiny` (a seeded demo model with random weights) or `builtin:pi0` (full size,
   * random weights: for benchmarks). Required.
   */
  g_object_class_install_property (
      gobject_class, PROP_MODEL,
      g_param_spec_string ("model", "Model",
                           "Checkpoint directory, model.safetensors, TorchScript file, or "
                           "builtin:pi0-tiny (untrained demo) or builtin:pi0 (full size, random "
                           "weights, for benchmarks). Required",
                           nullptr, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_TOKENIZER,
      g_param_spec_string ("tokenizer", "Tokenizer",
                           "SentencePiece model (the PaliGemma tokenizer); default: the one the "
                           "checkpoint's config.json names, or the bundled one for builtin models",
                           nullptr, rw_ready));
  /**
   * GstPi0Infer:instruction:
   *
   * The task in words. Can change while playing (from the next observation on); a
   * `pi0-instruction` event in the stream changes it at an exact observation.
   */
  g_object_class_install_property (
      gobject_class, PROP_INSTRUCTION,
      g_param_spec_string ("instruction", "Instruction",
                           "The task in words; changes apply from the next observation", "",
                           rw_playing));
  g_object_class_install_property (
      gobject_class, PROP_NORM_STATS,
      g_param_spec_string ("norm-stats", "Norm stats",
                           "openpi norm_stats.json (or a directory holding it): normalizes the "
                           "state and unnormalizes the actions; default: none (identity)",
                           nullptr, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_NORM_MODE,
      g_param_spec_enum ("norm-mode", "Norm mode", "How norm-stats are applied",
                         GST_TYPE_PI0_INFER_NORM_MODE, DEFAULT_NORM_MODE, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_ACTION_DIMS,
      g_param_spec_int ("action-dims", "Action dims",
                        "The robot's native action dimensions kept from the model's padded "
                        "ones (0 = all)",
                        0, 1024, 0, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_NUM_STEPS,
      g_param_spec_int ("num-steps", "Denoising steps",
                        "Flow-matching Euler steps per chunk (native Pi0 models)", 1, 1000,
                        DEFAULT_NUM_STEPS, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_PRECISION,
      g_param_spec_enum ("precision", "Precision",
                         "Weight precision (fp16 breaks Pi0: not offered)",
                         GST_TYPE_PI0_INFER_PRECISION, DEFAULT_PRECISION, rw_ready));
  g_object_class_install_property (gobject_class, PROP_DEVICE,
                                   g_param_spec_enum ("device", "Device", "Where the policy runs",
                                                      GST_TYPE_PI0_INFER_DEVICE, DEFAULT_DEVICE,
                                                      rw_ready));
  g_object_class_install_property (gobject_class, PROP_CUDA_DEVICE_ID,
                                   g_param_spec_int ("cuda-device-id", "CUDA device id",
                                                     "CUDA device ordinal", 0, 64, 0, rw_ready));
  /**
   * GstPi0Infer:seed:
   *
   * The flow-matching noise of observation N is drawn from seed + N, so a replay with the
   * same seed gives the same actions.
   */
  g_object_class_install_property (
      gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
                           "Noise seed: observation N uses seed + N (same seed, same actions)", 0,
                           G_MAXUINT64, 0, rw_playing));
  g_object_class_install_property (
      gobject_class, PROP_REQUIRE_STATE,
      g_param_spec_boolean ("require-state", "Require state",
                            "Give no actions for observations whose robot state is missing or "
                            "stale (else a missing state is zeros)",
                            TRUE, rw_playing));
  /**
   * GstPi0Infer:rtc:
   *
   * Real-time chunking (docs/rtc.md). When guided, each new chunk is sampled as an inpainting
   * of the chunk the robot is executing: `pi0actionsink` reports which chunk and row run (a
   * `pi0-executing` upstream event), and the rows of that chunk still to run after this
   * observation guide the new chunk's first rows, with the delay measured on the clock. Before
   * any report (or when the executing chunk has run out) chunks are sampled unguided. Native
   * Pi0 models only: with a TorchScript policy a warning says so and chunks stay unguided.
   */
  g_object_class_install_property (
      gobject_class, PROP_RTC,
      g_param_spec_enum ("rtc", "Real-time chunking",
                         "Guide each chunk toward the rest of the chunk being executed (needs "
                         "pi0actionsink downstream)",
                         GST_TYPE_PI0_INFER_RTC, DEFAULT_RTC, rw_playing));
  /**
   * GstPi0Infer:rtc-execution-horizon:
   *
   * The paper's s: the guidance mask ends at row horizon - s of the new chunk. 0 (the default)
   * takes s from the clock: the rows of the executing chunk already due when the new
   * observation was captured, so the mask covers all of the executing chunk that remains. A
   * larger s frees the tail sooner (less smoothing, more reactivity).
   */
  g_object_class_install_property (
      gobject_class, PROP_RTC_EXECUTION_HORIZON,
      g_param_spec_uint ("rtc-execution-horizon", "RTC execution horizon",
                         "Rows s: guidance ends at row horizon - s (0 = from the clock: the rows "
                         "of the executing chunk already due at the observation)",
                         0, 1000, 0, rw_playing));
  g_object_class_install_property (
      gobject_class, PROP_RTC_MAX_GUIDANCE_WEIGHT,
      g_param_spec_double ("rtc-max-guidance-weight", "RTC maximum guidance weight",
                           "The clip beta of the guidance weight (the paper: 5; with "
                           "rtc=guided-identity use 10)",
                           0.0, 1000.0, DEFAULT_RTC_MAX_GUIDANCE_WEIGHT, rw_playing));
  /**
   * GstPi0Infer:max-batch-size:
   *
   * Observations run together in one forward pass (serving several robots: one copy of the
   * weights, one pass for all). 1 (the default): each observation alone, as it comes. Above 1,
   * observations are held until this many need the policy, #GstPi0Infer:max-batch-wait has
   * passed since the first of them, or a serialized event (EOS, segment, caps) comes; each
   * buffer then leaves with its own chunk and metas, in input order. Each observation keeps its
   * own instruction, seed and state; its chunk equals the one it gets alone up to fp32 rounding
   * (docs/elements/pi0infer.md). A TorchScript policy runs a batch one observation at a time.
   */
  g_object_class_install_property (
      gobject_class, PROP_MAX_BATCH_SIZE,
      g_param_spec_uint ("max-batch-size", "Maximum batch size",
                         "Observations run together in one forward pass (1 = each alone)", 1, 64,
                         DEFAULT_MAX_BATCH_SIZE, rw_ready));
  /**
   * GstPi0Infer:max-batch-wait:
   *
   * With #GstPi0Infer:max-batch-size above 1: how long (ns, on the pipeline clock) the first
   * held observation waits for others before a partial batch runs. 0: a batch is never waited
   * for (each observation runs as it comes). Adds to the latency the element reports.
   */
  g_object_class_install_property (
      gobject_class, PROP_MAX_BATCH_WAIT,
      g_param_spec_uint64 ("max-batch-wait", "Maximum batch wait",
                           "With max-batch-size > 1: ns the first held observation waits for "
                           "more before a partial batch runs",
                           0, G_MAXUINT64, DEFAULT_MAX_BATCH_WAIT, rw_playing));
  g_object_class_install_property (
      gobject_class, PROP_MODEL_ID,
      g_param_spec_string ("model-id", "Model id",
                           "Identifies the loaded policy (set in the action meta)", nullptr,
                           (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));
  /**
   * GstPi0Infer:stats:
   *
   * `observations`, `chunks`, `skipped-no-state`, `non-finite`, `errors`, `last-error`,
   * `inference-p50-ms`, `inference-p99-ms` (over the last 200 inferences),
   * `inference-total-ms` (time spent inferring since start: divided by the wall time, how busy
   * the policy is), `warmup-ms`; real-time chunking: `rtc-guided` (chunks guided),
   * `rtc-feedback` (pi0-executing events taken), `rtc-feedback-ignored` (refused: malformed,
   * unknown chunk, from the future, row out of range; each with a warning), `rtc-delay` and
   * `rtc-prefix-rows` (of the last guided chunk); `forward-passes` (policy calls: one per
   * observation, or one per batch with #GstPi0Infer:max-batch-size above 1).
   */
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
                          "Observations, chunks, non-finite, errors, last error, inference time "
                          "p50/p99 in ms",
                          GST_TYPE_STRUCTURE,
                          (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 policy inference", "Filter/Analyzer/Video",
      "Runs a Pi0 policy on each observation and attaches the action chunk as metadata",
      "gst-pi0 developers");

  bt_class->start = GST_DEBUG_FUNCPTR (gst_pi0_infer_start);
  bt_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_infer_stop);
  bt_class->set_caps = GST_DEBUG_FUNCPTR (gst_pi0_infer_set_caps);
  bt_class->sink_event = GST_DEBUG_FUNCPTR (gst_pi0_infer_sink_event);
  bt_class->src_event = GST_DEBUG_FUNCPTR (gst_pi0_infer_src_event);
  bt_class->query = GST_DEBUG_FUNCPTR (gst_pi0_infer_query);
  bt_class->transform_ip = GST_DEBUG_FUNCPTR (gst_pi0_infer_transform_ip);
  bt_class->submit_input_buffer = GST_DEBUG_FUNCPTR (gst_pi0_infer_submit_input_buffer);
  bt_class->generate_output = GST_DEBUG_FUNCPTR (gst_pi0_infer_generate_output);
  /* The buffer is never changed, only a meta added. */
  bt_class->transform_ip_on_passthrough = FALSE;

  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_PRECISION, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_DEVICE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_NORM_MODE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_RTC, (GstPluginAPIFlags)0);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_infer_debug, "pi0infer", 0, "Pi0 policy inference");
}

static void
gst_pi0_infer_init (GstPi0Infer *self)
{
  self->priv = new GstPi0InferPrivate ();
  gst_base_transform_set_in_place (GST_BASE_TRANSFORM (self), TRUE);
}

static void
gst_pi0_infer_finalize (GObject *object)
{
  if (GST_PI0_INFER (object)->priv->batch.waiter.joinable ()) /* stop() always runs first */
    batch_stop (GST_PI0_INFER (object));
  delete GST_PI0_INFER (object)->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static std::string
value_string (const GValue *value)
{
  const gchar *s = g_value_get_string (value);
  return s ? s : "";
}

static void
gst_pi0_infer_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  auto priv = GST_PI0_INFER (object)->priv;
  std::lock_guard<std::mutex> lk (priv->settings_lock);
  Settings &s = priv->settings;

  switch (prop_id) {
    case PROP_MODEL:
      s.model = value_string (value);
      break;
    case PROP_TOKENIZER:
      s.tokenizer = value_string (value);
      break;
    case PROP_INSTRUCTION:
      s.instruction = value_string (value);
      break;
    case PROP_NORM_STATS:
      s.norm_stats = value_string (value);
      break;
    case PROP_NORM_MODE:
      s.norm_mode = (GstPi0InferNormMode)g_value_get_enum (value);
      break;
    case PROP_ACTION_DIMS:
      s.action_dims = g_value_get_int (value);
      break;
    case PROP_NUM_STEPS:
      s.num_steps = g_value_get_int (value);
      break;
    case PROP_PRECISION:
      s.precision = (GstPi0InferPrecision)g_value_get_enum (value);
      break;
    case PROP_DEVICE:
      s.device = (GstPi0InferDevice)g_value_get_enum (value);
      break;
    case PROP_CUDA_DEVICE_ID:
      s.cuda_device_id = g_value_get_int (value);
      break;
    case PROP_SEED:
      s.seed = g_value_get_uint64 (value);
      break;
    case PROP_MAX_BATCH_SIZE:
      s.max_batch_size = g_value_get_uint (value);
      break;
    case PROP_MAX_BATCH_WAIT:
      s.max_batch_wait = g_value_get_uint64 (value);
      break;
    case PROP_REQUIRE_STATE:
      s.require_state = g_value_get_boolean (value);
      break;
    case PROP_RTC:
      s.rtc = (GstPi0InferRtc)g_value_get_enum (value);
      break;
    case PROP_RTC_EXECUTION_HORIZON:
      s.rtc_execution_horizon = g_value_get_uint (value);
      break;
    case PROP_RTC_MAX_GUIDANCE_WEIGHT:
      s.rtc_max_guidance_weight = g_value_get_double (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static GstStructure *
make_stats (GstPi0Infer *self)
{
  Stats s;
  {
    std::lock_guard<std::mutex> lk (self->priv->stats_lock);
    s = self->priv->stats;
  }
  std::vector<double> lat (s.latencies_ms.begin (), s.latencies_ms.end ());
  return gst_structure_new (
      "pi0infer-stats", "observations", G_TYPE_UINT64, s.observations, "chunks", G_TYPE_UINT64,
      s.chunks, "skipped-no-state", G_TYPE_UINT64, s.skipped_state, "non-finite", G_TYPE_UINT64,
      s.non_finite, "errors", G_TYPE_UINT64, s.errors, "last-error", G_TYPE_STRING,
      s.last_error.c_str (), "inference-p50-ms", G_TYPE_DOUBLE, pi0::percentile (lat, 0.5),
      "inference-p99-ms", G_TYPE_DOUBLE, pi0::percentile (lat, 0.99), "inference-total-ms",
      G_TYPE_DOUBLE, s.total_ms, "warmup-ms", G_TYPE_DOUBLE, s.warmup_ms, "rtc-guided",
      G_TYPE_UINT64, s.rtc_guided, "rtc-feedback", G_TYPE_UINT64, s.rtc_feedback,
      "rtc-feedback-ignored", G_TYPE_UINT64, s.rtc_feedback_ignored, "rtc-delay", G_TYPE_UINT64,
      s.rtc_delay, "rtc-prefix-rows", G_TYPE_UINT64, s.rtc_prefix_rows, "forward-passes",
      G_TYPE_UINT64, s.passes, nullptr);
}

static void
gst_pi0_infer_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  auto self = GST_PI0_INFER (object);
  auto priv = self->priv;

  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, make_stats (self));
    return;
  }
  if (prop_id == PROP_MODEL_ID) {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    g_value_set_string (value, priv->model_id.empty () ? nullptr : priv->model_id.c_str ());
    return;
  }

  std::lock_guard<std::mutex> lk (priv->settings_lock);
  const Settings &s = priv->settings;
  switch (prop_id) {
    case PROP_MODEL:
      g_value_set_string (value, s.model.empty () ? nullptr : s.model.c_str ());
      break;
    case PROP_TOKENIZER:
      g_value_set_string (value, s.tokenizer.empty () ? nullptr : s.tokenizer.c_str ());
      break;
    case PROP_INSTRUCTION:
      g_value_set_string (value, s.instruction.c_str ());
      break;
    case PROP_NORM_STATS:
      g_value_set_string (value, s.norm_stats.empty () ? nullptr : s.norm_stats.c_str ());
      break;
    case PROP_NORM_MODE:
      g_value_set_enum (value, s.norm_mode);
      break;
    case PROP_ACTION_DIMS:
      g_value_set_int (value, s.action_dims);
      break;
    case PROP_NUM_STEPS:
      g_value_set_int (value, s.num_steps);
      break;
    case PROP_PRECISION:
      g_value_set_enum (value, s.precision);
      break;
    case PROP_DEVICE:
      g_value_set_enum (value, s.device);
      break;
    case PROP_CUDA_DEVICE_ID:
      g_value_set_int (value, s.cuda_device_id);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, s.seed);
      break;
    case PROP_MAX_BATCH_SIZE:
      g_value_set_uint (value, s.max_batch_size);
      break;
    case PROP_MAX_BATCH_WAIT:
      g_value_set_uint64 (value, s.max_batch_wait);
      break;
    case PROP_REQUIRE_STATE:
      g_value_set_boolean (value, s.require_state);
      break;
    case PROP_RTC:
      g_value_set_enum (value, s.rtc);
      break;
    case PROP_RTC_EXECUTION_HORIZON:
      g_value_set_uint (value, s.rtc_execution_horizon);
      break;
    case PROP_RTC_MAX_GUIDANCE_WEIGHT:
      g_value_set_double (value, s.rtc_max_guidance_weight);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static Settings
snapshot_settings (GstPi0Infer *self)
{
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  return self->priv->settings;
}

static void
record_error (GstPi0Infer *self, const std::string &what)
{
  std::lock_guard<std::mutex> lk (self->priv->stats_lock);
  self->priv->stats.errors++;
  self->priv->stats.last_error = what;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                     */

/* Where the builtin models find their bundled tokenizer: $PI0_DATA_DIR, the installed data
 * directory, then the source tree (uninstalled runs and the tests). */
static std::vector<std::string>
data_dirs ()
{
  std::vector<std::string> dirs;
  if (const gchar *d = g_getenv ("PI0_DATA_DIR"))
    dirs.push_back (d);
  dirs.push_back (PI0_DATADIR);
  dirs.push_back (PI0_SOURCE_DATADIR);
  return dirs;
}

static pi0::OpenOptions
open_options (const Settings &s)
{
  pi0::OpenOptions o;
  o.device = s.device == GST_PI0_INFER_DEVICE_CUDA  ? pi0::DeviceChoice::Cuda
             : s.device == GST_PI0_INFER_DEVICE_CPU ? pi0::DeviceChoice::Cpu
                                                    : pi0::DeviceChoice::Auto;
  o.cuda_device_id = s.cuda_device_id;
  o.precision = s.precision == GST_PI0_INFER_PRECISION_BF16   ? pi0::PrecisionChoice::Bf16
                : s.precision == GST_PI0_INFER_PRECISION_FP32 ? pi0::PrecisionChoice::Fp32
                                                              : pi0::PrecisionChoice::Auto;
  o.num_steps = s.num_steps;
  o.tokenizer = s.tokenizer;
  o.data_dirs = data_dirs ();
  o.norm_stats = s.norm_stats;
  o.norm_mode = s.norm_mode == NORM_QUANTILE ? pi0::NormMode::Quantile : pi0::NormMode::ZScore;
  o.action_dims = s.action_dims;
  return o;
}

static void
post_open_error (GstPi0Infer *self, const pi0::OpenError &e)
{
  using Kind = pi0::OpenError::Kind;
  switch (e.kind ()) {
    case Kind::NotFound:
      GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("%s", e.what ()), (nullptr));
      break;
    case Kind::Settings:
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", e.what ()), (nullptr));
      break;
    case Kind::Unreadable:
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("%s", e.what ()), (nullptr));
      break;
    case Kind::Library:
      GST_ELEMENT_ERROR (self, LIBRARY, INIT, ("%s", e.what ()), (nullptr));
      break;
  }
}

static gboolean
gst_pi0_infer_start (GstBaseTransform *trans)
{
  auto self = GST_PI0_INFER (trans);
  auto priv = self->priv;
  Settings s = snapshot_settings (self);

  if (s.model.empty ()) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("No model: set model= to a checkpoint directory, a model.safetensors, a "
                        "TorchScript file, or builtin:pi0-tiny (an untrained demo model)."),
                       (nullptr));
    return FALSE;
  }

  std::unique_ptr<pi0::OpenedPolicy> policy;
  try {
    policy = pi0::open_policy (s.model, open_options (s));
  } catch (const pi0::OpenError &e) {
    post_open_error (self, e);
    return FALSE;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR (self, LIBRARY, INIT, ("Could not load model '%s'.", s.model.c_str ()),
                       ("%s", e.what ()));
    return FALSE;
  }

  /* One blank observation through the whole path now: a broken policy fails here, before any
   * observation, and the first real one is not slow (on CUDA the graph is captured now). */
  auto t0 = std::chrono::steady_clock::now ();
  bool warmed = false;
  try {
    warmed = policy->warmup ();
  } catch (const c10::Error &e) {
    GST_ELEMENT_ERROR (self, LIBRARY, INIT,
                       ("The model failed its warm-up run: %s", e.what_without_backtrace ()),
                       (nullptr));
    return FALSE;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR (self, LIBRARY, INIT, ("The model failed its warm-up run: %s", e.what ()),
                       (nullptr));
    return FALSE;
  }
  double warm_ms =
      std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0).count ();
  if (!warmed)
    GST_WARNING_OBJECT (self,
                        "no warm-up run: the model does not declare num_views, image_size and "
                        "state_dim, so it first runs on the first observation");
  GST_INFO_OBJECT (self, "loaded %s: %s (warm-up %.1f ms)", policy->model_id ().c_str (),
                   policy->describe ().c_str (), warm_ms);

  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats = Stats ();
    priv->stats.warmup_ms = warm_ms;
    priv->model_id = policy->model_id ();
  }
  priv->state = State ();
  priv->rtc.reset ();
  priv->policy = std::move (policy);
  batch_start (self, s.max_batch_size);
  return TRUE;
}

static gboolean
gst_pi0_infer_stop (GstBaseTransform *trans)
{
  auto priv = GST_PI0_INFER (trans)->priv;
  batch_stop (GST_PI0_INFER (trans)); /* before the policy goes: the wait thread may use it */
  priv->policy.reset ();
  priv->state = State ();
  return TRUE;
}

/* ------------------------------------------------------------------------------------------ */
/* Caps, events, queries                                                                       */

static gboolean
gst_pi0_infer_set_caps (GstBaseTransform *trans, GstCaps *incaps, GstCaps *outcaps)
{
  auto self = GST_PI0_INFER (trans);
  const GstStructure *st = gst_caps_get_structure (incaps, 0);
  gint views = 0;

  if (!self->priv->policy)
    return TRUE;
  int slots = self->priv->policy->spec ().num_views;
  if (gst_structure_get_int (st, "views", &views) && slots > 0 && views > slots) {
    GST_ELEMENT_ERROR (
        self, CORE, NEGOTIATION,
        ("The observations have %d views but the model takes at most %d.", views, slots),
        ("caps %" GST_PTR_FORMAT, incaps));
    return FALSE;
  }
  return TRUE;
}

static gboolean
gst_pi0_infer_sink_event (GstBaseTransform *trans, GstEvent *event)
{
  auto self = GST_PI0_INFER (trans);
  const gchar *text = nullptr;

  /* Serialized, so it applies from the next observation exactly. */
  if (gst_pi0_instruction_event_parse (event, &text)) {
    GST_INFO_OBJECT (self, "instruction from the stream: \"%s\"", text);
    {
      std::lock_guard<std::mutex> lk (self->priv->settings_lock);
      self->priv->settings.instruction = text;
    }
    g_object_notify (G_OBJECT (self), "instruction");
    /* Batching: held observations have their instruction already; the event waits with them,
     * to reach downstream between the same buffers. */
    if (!self->priv->batch.held.empty ()) {
      Prepared p;
      p.event = event;
      self->priv->batch.held.push_back (std::move (p));
      return TRUE;
    }
  } else if (self->priv->batch.size > 1) {
    if (GST_EVENT_TYPE (event) == GST_EVENT_FLUSH_STOP) {
      std::deque<Prepared> held = take_held (self);
      unref_items (held);
    } else if (GST_EVENT_IS_SERIALIZED (event)) { /* EOS, segment, caps...: the held run first */
      GstFlowReturn r = run_held (self);
      if (r != GST_FLOW_OK)
        GST_DEBUG_OBJECT (self, "pushing the held batch before %s: %s", GST_EVENT_TYPE_NAME (event),
                          gst_flow_get_name (r));
    }
  }
  return GST_BASE_TRANSFORM_CLASS (parent_class)->sink_event (trans, event);
}

/* A pi0-executing event refused: counted, logged, and posted as a warning for the 1st, 2nd,
 * 4th, 8th... (a sink gone wrong must not flood the bus). Nothing else changes. */
static void
ignore_feedback (GstPi0Infer *self, const std::string &why)
{
  guint64 n;
  {
    std::lock_guard<std::mutex> lk (self->priv->stats_lock);
    n = ++self->priv->stats.rtc_feedback_ignored;
  }
  GST_WARNING_OBJECT (self, "pi0-executing ignored: %s", why.c_str ());
  if ((n & (n - 1)) == 0)
    GST_ELEMENT_WARNING (
        self, STREAM, FAILED,
        ("Feedback from the sink ignored: %s (%" G_GUINT64_FORMAT " so far).", why.c_str (), n),
        (nullptr));
}

/* What the sink says the robot executes. Checked before anything is kept: a malformed event, a
 * chunk this element did not make (or no longer remembers), a row beyond the chunk, a time in
 * the future of our clock: ignored with a warning. */
static void
take_feedback (GstPi0Infer *self, GstEvent *event)
{
  guint64 chunk_id = 0, period = 0;
  guint row = 0;
  GstClockTime time = GST_CLOCK_TIME_NONE;
  if (!gst_pi0_executing_event_parse (event, &chunk_id, &row, &time, &period)) {
    gchar *str = gst_structure_to_string (gst_event_get_structure (event));
    std::string why = std::string ("malformed event ") + str;
    g_free (str);
    ignore_feedback (self, why);
    return;
  }
  const std::string why = self->priv->rtc.feedback (
      chunk_id, row, time, period, gst_pi0_element_get_running_time (GST_ELEMENT (self)));
  if (!why.empty ()) {
    ignore_feedback (self, why);
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->stats_lock);
  self->priv->stats.rtc_feedback++;
}

static gboolean
gst_pi0_infer_src_event (GstBaseTransform *trans, GstEvent *event)
{
  if (GST_EVENT_TYPE (event) == GST_EVENT_CUSTOM_UPSTREAM &&
      gst_event_has_name (event, GST_PI0_EXECUTING_EVENT_NAME)) {
    take_feedback (GST_PI0_INFER (trans), event);
    gst_event_unref (event); /* ours: nothing upstream needs it */
    return TRUE;
  }
  return GST_BASE_TRANSFORM_CLASS (parent_class)->src_event (trans, event);
}

static gboolean
gst_pi0_infer_query (GstBaseTransform *trans, GstPadDirection direction, GstQuery *query)
{
  auto self = GST_PI0_INFER (trans);

  if (!GST_BASE_TRANSFORM_CLASS (parent_class)->query (trans, direction, query))
    return FALSE;
  if (direction == GST_PAD_SRC && GST_QUERY_TYPE (query) == GST_QUERY_LATENCY) {
    gboolean live;
    GstClockTime min, max;
    gst_query_parse_latency (query, &live, &min, &max);
    /* Our processing time: the p99 of recent inferences, or the warm-up before any. */
    GstStructure *s = make_stats (self);
    double p99 = 0, warm = 0;
    gst_structure_get_double (s, "inference-p99-ms", &p99);
    gst_structure_get_double (s, "warmup-ms", &warm);
    gst_structure_free (s);
    GstClockTime ours = (GstClockTime)((p99 > 0 ? p99 : warm) * GST_MSECOND);
    Settings st = snapshot_settings (self);
    if (st.max_batch_size > 1) /* a held observation may wait this long for a batch */
      ours += std::min<guint64> (st.max_batch_wait, GST_SECOND * 3600);
    min += ours;
    if (GST_CLOCK_TIME_IS_VALID (max))
      max += ours;
    GST_DEBUG_OBJECT (self, "adding %" GST_TIME_FORMAT " of processing latency",
                      GST_TIME_ARGS (ours));
    gst_query_set_latency (query, live, min, max);
  }
  return TRUE;
}

/* ------------------------------------------------------------------------------------------ */
/* Inference                                                                                   */

static at::ScalarType
torch_dtype (GstPi0DType d)
{
  switch (d) {
    case GST_PI0_DTYPE_FLOAT16:
      return at::kHalf;
    case GST_PI0_DTYPE_BFLOAT16:
      return at::kBFloat16;
    case GST_PI0_DTYPE_UINT8:
      return at::kByte;
    case GST_PI0_DTYPE_FLOAT32:
    default:
      return at::kFloat;
  }
}

/* The images of the tensor meta, without a copy, and its masks. Device memory comes with
 * cudaprep's CUDA event, which the policy's stream waits on (no CPU thread waits for the GPU). */
static void
request_images (const GstPi0TensorMeta *tm, pi0::Request *rq)
{
  std::vector<int64_t> shape (tm->shape, tm->shape + tm->n_dims);
  at::TensorOptions o = at::TensorOptions ().dtype (torch_dtype (tm->dtype));
  if (tm->device == GST_PI0_DEVICE_CUDA) {
    if (!pi0::cuda_available ())
      throw pi0::Error ("the tensor is in CUDA memory but LibTorch here has no CUDA device");
    o = o.device (c10::Device (c10::kCUDA, (c10::DeviceIndex)tm->device_id));
    rq->ready_event = tm->ready_event;
  }
  /* A view of the meta's memory; the buffer (and so the storage) outlives the inference. */
  rq->images = at::from_blob (tm->data, shape, o);
  at::Tensor m = at::zeros ({(int64_t)tm->n_masks}, at::kBool);
  for (guint i = 0; i < tm->n_masks; i++)
    m[i] = (bool)tm->image_masks[i];
  rq->image_masks = m;
}

/* Everything before the policy runs: the checks, the state rule, the request (images, state,
 * instruction, seed, real-time chunking guidance). OK with p->infer false: the buffer passes on
 * without actions. */
static GstFlowReturn
prepare_observation (GstPi0Infer *self, const Settings &s, GstBuffer *buf, Prepared *p)
{
  auto priv = self->priv;
  pi0::OpenedPolicy *policy = priv->policy.get ();

  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats.observations++;
  }
  if (!policy) {
    GST_ELEMENT_ERROR (self, CORE, FAILED, ("No model loaded."), (nullptr));
    return GST_FLOW_ERROR;
  }

  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (buf);
  GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (buf);
  if (!tm || !om) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                       ("An observation without %s reached pi0infer: put pi0viewmux and cudaprep "
                        "before it.",
                        !tm ? "a model input tensor (GstPi0TensorMeta)" : "an observation meta"),
                       ("%" GST_PTR_FORMAT, buf));
    return GST_FLOW_ERROR;
  }

  const pi0::PolicySpec &spec = policy->spec ();
  if (tm->n_dims != 4 || tm->shape[1] != 3 ||
      (spec.image_size > 0 &&
       (tm->shape[2] != spec.image_size || tm->shape[3] != spec.image_size)) ||
      (spec.num_views > 0 && tm->shape[0] > spec.num_views) || tm->dtype == GST_PI0_DTYPE_UINT8) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                       ("The model takes up to %d views of 3x%dx%d float images, but the input "
                        "tensor is [%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT
                        ",%" G_GINT64_FORMAT "] %s: set cudaprep width=%d height=%d.",
                        spec.num_views, spec.image_size, spec.image_size, tm->shape[0],
                        tm->shape[1], tm->shape[2], tm->shape[3],
                        gst_pi0_dtype_to_string (tm->dtype), spec.image_size, spec.image_size),
                       (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }

  /* No state: no actions, unless the user said a missing state is zeros. */
  guint state_dim = 0;
  const gfloat *state = gst_pi0_observation_meta_get_state (om, &state_dim);
  bool stale = (om->state_flags & GST_PI0_STATE_FLAG_STALE) != 0;
  if ((!state || stale) && s.require_state) {
    {
      std::lock_guard<std::mutex> lk (priv->stats_lock);
      priv->stats.skipped_state++;
    }
    if (!priv->state.warned_no_state) {
      priv->state.warned_no_state = true;
      GST_ELEMENT_WARNING (self, STREAM, FAILED,
                           ("Observation %" G_GUINT64_FORMAT " has %s robot state: no actions for "
                            "it (set require-state=false to use zeros).",
                            om->sequence, state ? "a stale" : "no"),
                           (nullptr));
    }
    return GST_FLOW_OK;
  }
  if (spec.state_dim > 0 && (int)state_dim > spec.state_dim) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                       ("The robot state has %u values but the model takes at most %d.", state_dim,
                        spec.state_dim),
                       (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }

  double last_ms = 0;
  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    if (!priv->stats.latencies_ms.empty ())
      last_ms = priv->stats.latencies_ms.back ();
  }
  p->sequence = om->sequence;
  p->observation_time = om->observation_time;
  p->instruction = s.instruction;
  try {
    pi0::Request &rq = p->rq;
    request_images (tm, &rq);
    if (state)
      rq.state = at::from_blob ((void *)state, {(int64_t)state_dim}, at::kFloat).clone ();
    rq.prompt = s.instruction;
    rq.seed = s.seed + om->sequence;
    if (s.rtc != GST_PI0_INFER_RTC_OFF) {
      if (!policy->supports_guidance ()) {
        if (!priv->state.warned_rtc_unsupported) {
          priv->state.warned_rtc_unsupported = true;
          GST_ELEMENT_WARNING (self, STREAM, FAILED,
                               ("rtc is on but this policy cannot be guided (TorchScript): "
                                "chunks are sampled unguided."),
                               ("%s", policy->describe ().c_str ()));
        }
      } else {
        /* docs/rtc.md, "In the chain": the prefix, the delay and the horizon. */
        p->guided = priv->rtc.guidance (om->observation_time,
                                        gst_pi0_element_get_running_time (GST_ELEMENT (self)),
                                        last_ms, s.rtc_execution_horizon, s.rtc_max_guidance_weight,
                                        s.rtc == GST_PI0_INFER_RTC_GUIDED_IDENTITY, &rq.guidance);
      }
    }
  } catch (const std::exception &e) {
    record_error (self, e.what ());
    GST_ELEMENT_ERROR (
        self, STREAM, FAILED,
        ("Inference failed on observation %" G_GUINT64_FORMAT ": %s", om->sequence, e.what ()),
        (nullptr));
    return GST_FLOW_ERROR;
  }
  p->infer = true;
  return GST_FLOW_OK;
}

/* The policy on one prepared observation; a guidance prefix the model refuses falls back to an
 * unguided chunk with a warning. An error is posted and returned. */
static void
count_pass (GstPi0Infer *self)
{
  std::lock_guard<std::mutex> lk (self->priv->stats_lock);
  self->priv->stats.passes++;
}

static GstFlowReturn
infer_alone (GstPi0Infer *self, Prepared *p, pi0::Response *response)
{
  pi0::OpenedPolicy *policy = self->priv->policy.get ();
  count_pass (self);
  try {
    if (p->guided) {
      try {
        *response = policy->infer (p->rq);
      } catch (const pi0::Error &e) {
        /* A prefix the model refuses: this chunk unguided, said once per occurrence. */
        GST_ELEMENT_WARNING (self, STREAM, FAILED,
                             ("Real-time chunking failed on observation %" G_GUINT64_FORMAT
                              ": sampled unguided.",
                              p->sequence),
                             ("%s", e.what ()));
        p->guided = false;
        p->rq.guidance = pi0::PolicyGuidance ();
        *response = policy->infer (p->rq);
      }
    } else {
      *response = policy->infer (p->rq);
    }
  } catch (const c10::Error &e) {
    record_error (self, e.what_without_backtrace ());
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
                       ("Inference failed on observation %" G_GUINT64_FORMAT ".", p->sequence),
                       ("LibTorch: %s", e.what_without_backtrace ()));
    return GST_FLOW_ERROR;
  } catch (const std::exception &e) {
    record_error (self, e.what ());
    GST_ELEMENT_ERROR (
        self, STREAM, FAILED,
        ("Inference failed on observation %" G_GUINT64_FORMAT ": %s", p->sequence, e.what ()),
        (nullptr));
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
}

/* The chunk onto its buffer as a GstPi0ActionMeta, the stats (@busy_ms: the policy's time this
 * chunk adds, 0 for the 2nd.. chunk of a batch), and the chunk into the real-time chunking
 * history. */
static void
attach_chunk (GstPi0Infer *self, GstBuffer *buf, Prepared *p, const pi0::Response &response,
              double ms, double busy_ms)
{
  auto priv = self->priv;
  pi0::OpenedPolicy *policy = priv->policy.get ();
  p->done = true;
  if (p->guided) {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats.rtc_guided++;
    priv->stats.rtc_delay = (guint64)p->rq.guidance.delay;
    priv->stats.rtc_prefix_rows = (guint64)p->rq.guidance.prefix.size (0);
  }
  if (response.prompt_truncated && !priv->state.warned_truncated) {
    priv->state.warned_truncated = true;
    GST_ELEMENT_WARNING (self, STREAM, FAILED,
                         ("The instruction needs more than the model's %d tokens: it was cut.",
                          policy->prompt_length ()),
                         ("instruction \"%s\"", p->instruction.c_str ()));
  }
  const at::Tensor &actions = response.actions;
  GstPi0ActionMeta *am =
      gst_buffer_add_pi0_action_meta (buf, (guint)actions.size (0), (guint)actions.size (1),
                                      actions.data_ptr<float> (), policy->model_id ().c_str ());
  am->sequence = p->sequence;
  am->observation_time = p->observation_time;
  am->inference_time = (GstClockTime)(ms * GST_MSECOND);
  am->done_time = gst_pi0_element_get_running_time (GST_ELEMENT (self));
  if (policy->untrained ())
    am->flags = (GstPi0ActionFlags)(am->flags | GST_PI0_ACTION_FLAG_UNTRAINED);
  bool finite = !(am->flags & GST_PI0_ACTION_FLAG_NON_FINITE);

  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats.chunks++;
    if (!finite)
      priv->stats.non_finite++;
    priv->stats.latencies_ms.push_back (ms);
    priv->stats.total_ms += busy_ms;
    if (priv->stats.latencies_ms.size () > LATENCY_WINDOW)
      priv->stats.latencies_ms.pop_front ();
  }
  if (!finite)
    GST_WARNING_OBJECT (self, "observation %" G_GUINT64_FORMAT ": non-finite actions (flagged)",
                        p->sequence);
  else {
    /* Kept for real-time chunking: the sink may now execute it. A non-finite chunk is never
     * executed, so it is never a prefix. */
    priv->rtc.chunk_made (am->sequence, am->observation_time, am->horizon, am->dim, am->actions);
  }
  GST_LOG_OBJECT (self, "observation %" G_GUINT64_FORMAT ": %ux%u actions in %.2f ms", p->sequence,
                  am->horizon, am->dim, ms);
}

static double
ms_since (std::chrono::steady_clock::time_point t0)
{
  return std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
      .count ();
}

static GstFlowReturn
gst_pi0_infer_transform_ip (GstBaseTransform *trans, GstBuffer *buf)
{
  auto self = GST_PI0_INFER (trans);
  Settings s = snapshot_settings (self);
  Prepared p;
  GstFlowReturn ret = prepare_observation (self, s, buf, &p);
  if (ret != GST_FLOW_OK || !p.infer)
    return ret;
  auto t0 = std::chrono::steady_clock::now ();
  pi0::Response response;
  ret = infer_alone (self, &p, &response);
  if (ret != GST_FLOW_OK)
    return ret;
  double ms = ms_since (t0);
  attach_chunk (self, buf, &p, response, ms, ms);
  return GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Batching (max-batch-size > 1)                                                              */

/* Takes the held items and ends any wait for them. */
static std::deque<Prepared>
take_held (GstPi0Infer *self)
{
  Batching &b = self->priv->batch;
  std::deque<Prepared> held;
  held.swap (b.held);
  b.n_infer = 0;
  std::lock_guard<std::mutex> lk (b.lock);
  b.armed = false;
  b.generation++;
  if (b.wait_id)
    gst_clock_id_unschedule (b.wait_id);
  return held;
}

static void
unref_items (std::deque<Prepared> &items)
{
  for (Prepared &p : items) {
    if (p.buf)
      gst_buffer_unref (p.buf);
    if (p.event)
      gst_event_unref (p.event);
    p.buf = nullptr;
    p.event = nullptr;
  }
}

/* Runs the held observations, those that need the policy as one forward pass, and pushes them
 * (with the held events) in input order. If the stacked pass throws, each runs alone, as with
 * max-batch-size=1 (so a request the policy refuses fails as it would alone). Needs the sink
 * pad's stream lock. */
static GstFlowReturn
run_held (GstPi0Infer *self)
{
  std::deque<Prepared> held = take_held (self);
  if (held.empty ())
    return GST_FLOW_OK;
  std::vector<Prepared *> todo;
  for (Prepared &p : held)
    if (p.buf && p.infer)
      todo.push_back (&p);

  GstFlowReturn ret = GST_FLOW_OK;
  bool together = false;
  if (todo.size () > 1) {
    std::vector<pi0::Request> rqs;
    for (Prepared *p : todo)
      rqs.push_back (p->rq);
    auto t0 = std::chrono::steady_clock::now ();
    std::vector<pi0::Response> responses;
    try {
      count_pass (self);
      responses = self->priv->policy->infer (rqs);
      together = true;
    } catch (const std::exception &e) {
      GST_DEBUG_OBJECT (self, "a batch of %zu failed (%s): each runs alone", todo.size (),
                        e.what ());
    }
    if (together) {
      double ms = ms_since (t0);
      for (size_t i = 0; i < todo.size (); i++)
        attach_chunk (self, todo[i]->buf, todo[i], responses[i], ms, i == 0 ? ms : 0.0);
      GST_LOG_OBJECT (self, "%zu observations in one pass: %.2f ms", todo.size (), ms);
    }
  }
  if (!together) {
    for (Prepared *p : todo) {
      auto t0 = std::chrono::steady_clock::now ();
      pi0::Response response;
      ret = infer_alone (self, p, &response);
      if (ret != GST_FLOW_OK)
        break;
      double ms = ms_since (t0);
      attach_chunk (self, p->buf, p, response, ms, ms);
    }
  }

  /* In order, up to the first observation that failed (its error is posted). */
  GstPad *src = GST_BASE_TRANSFORM_SRC_PAD (self);
  for (Prepared &p : held) {
    if (p.buf && p.infer && !p.done)
      break;
    GstFlowReturn r = GST_FLOW_OK;
    if (p.event) {
      gst_pad_push_event (src, p.event);
      p.event = nullptr;
    } else {
      r = gst_pad_push (src, p.buf);
      p.buf = nullptr;
    }
    if (r != GST_FLOW_OK) {
      ret = r;
      break;
    }
  }
  unref_items (held);
  return ret;
}

/* The wait thread: when a wait ends (max-batch-wait after the first held observation, on the
 * pipeline clock) with the same observations still held, it runs them. */
static void
batch_wait_loop (GstPi0Infer *self)
{
  Batching &b = self->priv->batch;
  GstPad *sinkpad = GST_BASE_TRANSFORM_SINK_PAD (self);
  std::unique_lock<std::mutex> lk (b.lock);
  while (!b.stopping) {
    if (!b.armed) {
      b.cond.wait (lk);
      continue;
    }
    const guint64 generation = b.generation;
    GstClockID id = gst_clock_new_single_shot_id (b.clock, b.deadline);
    b.wait_id = id;
    lk.unlock ();
    gst_clock_id_wait (id, nullptr);
    lk.lock ();
    b.wait_id = nullptr;
    gst_clock_id_unref (id);
    if (b.stopping || !b.armed || b.generation != generation)
      continue;
    lk.unlock ();
    GST_PAD_STREAM_LOCK (sinkpad);
    bool still;
    {
      std::lock_guard<std::mutex> g (b.lock);
      still = !b.stopping && b.armed && b.generation == generation;
    }
    if (still) {
      GstFlowReturn r = run_held (self);
      if (r != GST_FLOW_OK)
        GST_DEBUG_OBJECT (self, "pushing a partial batch: %s", gst_flow_get_name (r));
    }
    GST_PAD_STREAM_UNLOCK (sinkpad);
    lk.lock ();
  }
}

static void
batch_start (GstPi0Infer *self, guint size)
{
  Batching &b = self->priv->batch;
  b.size = size;
  b.stopping = false;
  b.armed = false;
  if (size > 1)
    b.waiter = std::thread (batch_wait_loop, self);
}

static void
batch_stop (GstPi0Infer *self)
{
  Batching &b = self->priv->batch;
  {
    std::lock_guard<std::mutex> lk (b.lock);
    b.stopping = true;
    if (b.wait_id)
      gst_clock_id_unschedule (b.wait_id);
  }
  b.cond.notify_all ();
  if (b.waiter.joinable ())
    b.waiter.join ();
  std::deque<Prepared> held = take_held (self);
  unref_items (held);
  gst_clear_object (&b.clock);
  b.size = 1;
}

static GstFlowReturn
gst_pi0_infer_submit_input_buffer (GstBaseTransform *trans, gboolean is_discont, GstBuffer *buf)
{
  auto self = GST_PI0_INFER (trans);
  Batching &b = self->priv->batch;
  if (b.size <= 1)
    return GST_BASE_TRANSFORM_CLASS (parent_class)->submit_input_buffer (trans, is_discont, buf);

  Settings s = snapshot_settings (self);
  Prepared p;
  p.buf = gst_buffer_make_writable (buf);
  GstFlowReturn ret = prepare_observation (self, s, p.buf, &p);
  if (ret != GST_FLOW_OK) {
    gst_buffer_unref (p.buf);
    return ret;
  }
  const bool infer = p.infer;
  if (!infer && b.held.empty ())
    return gst_pad_push (GST_BASE_TRANSFORM_SRC_PAD (self), p.buf);
  b.held.push_back (std::move (p));
  if (!infer)
    return GST_FLOW_OK;
  if (++b.n_infer >= b.size || s.max_batch_wait == 0)
    return run_held (self);
  if (b.n_infer == 1) { /* the first: wait for more, at most max-batch-wait */
    GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
    if (!clock)
      clock = gst_system_clock_obtain ();
    const GstClockTime now = gst_clock_get_time (clock);
    std::lock_guard<std::mutex> lk (b.lock);
    gst_object_replace ((GstObject **)&b.clock, GST_OBJECT (clock));
    gst_object_unref (clock);
    b.deadline = s.max_batch_wait < GST_CLOCK_TIME_NONE - 1 - now ? now + s.max_batch_wait
                                                                  : GST_CLOCK_TIME_NONE - 1;
    b.armed = true;
    b.generation++;
    b.cond.notify_all ();
  }
  return GST_FLOW_OK;
}

static GstFlowReturn
gst_pi0_infer_generate_output (GstBaseTransform *trans, GstBuffer **outbuf)
{
  auto self = GST_PI0_INFER (trans);
  if (self->priv->batch.size <= 1)
    return GST_BASE_TRANSFORM_CLASS (parent_class)->generate_output (trans, outbuf);
  *outbuf = nullptr; /* batching pushes the buffers itself, in order */
  return GST_FLOW_OK;
}
