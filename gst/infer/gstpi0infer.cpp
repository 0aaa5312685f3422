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

#include "gst/infer/gstpi0infer.h"

#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"
#include "gst/common/pi0clockwait.h"
#include "gst/common/pi0notice.h"
#include "gst/infer/pi0batcher.h"
#include "gst/infer/pi0inferrunner.h"

#include <gst/pi0/pi0.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY (gst_pi0_infer_debug); /* pi0inferrunner.cpp logs in it too */
#define GST_CAT_DEFAULT gst_pi0_infer_debug

/* Locking: settings_lock guards Settings. The batching wait's lock (pi0clockwait.h) is never
 * held while running the policy or pushing; its thread takes the sink pad's stream lock to run a
 * partial batch. The runner's stats lock is its own (pi0inferrunner.h).
 *
 * The element is glue. Everything about the policy (opening it, reading an observation, the
 * request, running it alone or in a batch, the action meta, real-time chunking's feedback, the
 * stats) is its engine's, pi0::infer::Runner (pi0inferrunner.h, over inference/'s
 * pi0::open_policy() and pi0::RtcTracker); which observations are held for a batch and when they
 * are due is pi0::Batcher's (pi0batcher.h), and the wait for it pi0::ClockWait's (pi0clockwait.h). Here:
 * properties, caps, events, the LATENCY query, the clock, posting the engine's notices, the
 * done_time stamp, pushing. */

using pi0::infer::Prepared;
using pi0::infer::Settings;
using Batcher = pi0::Batcher<Prepared>;

/* The batcher and the wait take the pipeline's times as they are. */
static_assert (Batcher::kNever == GST_CLOCK_TIME_NONE, "one 'no time' for both");

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
  PROP_TRANSFORMS,
  PROP_DISCRETE_STATE_INPUT,
  PROP_MODEL_ID,
  PROP_STATS,
};

/* A deadline of now + this never nears 2^63 ns (the clock's signed range). */
static constexpr guint64 kMaxBatchWait = 3600 * GST_SECOND;

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_CAPS));

struct GstPi0InferPrivate {
  explicit GstPi0InferPrivate (GstElement *self) : runner (GST_OBJECT (self)) {}
  std::mutex settings_lock;
  Settings settings;         /* under settings_lock */
  pi0::infer::Runner runner; /* the sink stream lock's holder's (stats: any thread) */
  Batcher batcher;           /* the sink stream lock's holder's; max-batch-size fixed at start */
  pi0::ClockWait wait;       /* for a partial batch: the batcher's deadline */
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

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_infer_norm_mode_get_type, "GstPi0InferNormMode",
                          {GST_PI0_INFER_NORM_MODE_ZSCORE,
                           "(x - mean) / (std + 1e-6), as pi0 trains", "zscore"},
                          {GST_PI0_INFER_NORM_MODE_QUANTILE,
                           "[q01, q99] to [-1, 1], as pi05 and pi0-FAST train", "quantile"})

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_infer_discrete_state_get_type, "GstPi0InferDiscreteState",
    {GST_PI0_INFER_DISCRETE_STATE_AUTO,
     "What the checkpoint says (openpi's converter writes nothing: then bins)", "auto"},
    {GST_PI0_INFER_DISCRETE_STATE_BINS,
     "The state as 256 prompt bins (discrete_state_input=True: pi05_droid, pi05_base)", "bins"},
    {GST_PI0_INFER_DISCRETE_STATE_NONE, "No state (discrete_state_input=False: pi05_libero)",
     "none"})

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

static void
gst_pi0_infer_class_init (GstPi0InferClass *klass)
{
  auto gobject_class = G_OBJECT_CLASS (klass);
  auto element_class = GST_ELEMENT_CLASS (klass);
  auto bt_class = GST_BASE_TRANSFORM_CLASS (klass);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_infer_finalize);
  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_infer_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_infer_get_property);
  auto install = [gobject_class] (guint id, GParamSpec *ps) {
    g_object_class_install_property (gobject_class, id, ps);
  };
  /* Every default: the initialisers of the runner's Settings (pi0inferrunner.h), which the
   * properties fill. */
  const Settings d;

  /**
   * GstPi0Infer:model:
   *
   * The policy: a checkpoint directory (config.json + model.safetensors, openpi-PyTorch or
   * LeRobot layout, pi0 or pi0.5: the checkpoint says which), a model.safetensors file, a
   * TorchScript file (.pt, .ts, .torchscript), or `builtin:pi0-tiny` / `builtin:pi05-tiny`
   * (seeded demo models with random weights) or `builtin:pi0` / `builtin:pi05` (full size,
   * random weights: for benchmarks). A pi0.5 model reads the state through its prompt: it
   * needs a state on every observation. Required.
   */
  install (PROP_MODEL, g_param_spec_string (
                           "model", "Model",
                           "Checkpoint directory (pi0 or pi0.5), model.safetensors, TorchScript "
                           "file, or builtin:pi0-tiny / builtin:pi05-tiny (untrained demos) or "
                           "builtin:pi0 / builtin:pi05 (full size, random weights, for "
                           "benchmarks). Required",
                           nullptr, GST_PI0_PARAM_READY));
  install (
      PROP_TOKENIZER,
      g_param_spec_string ("tokenizer", "Tokenizer",
                           "SentencePiece model (the PaliGemma tokenizer); default: the one the "
                           "checkpoint's config.json names, or the bundled one for builtin models",
                           nullptr, GST_PI0_PARAM_READY));
  /**
   * GstPi0Infer:instruction:
   *
   * The task in words. Can change while playing (from the next observation on); a
   * `pi0-instruction` event in the stream changes it at an exact observation.
   */
  install (PROP_INSTRUCTION,
           g_param_spec_string ("instruction", "Instruction",
                                "The task in words; changes apply from the next observation",
                                d.instruction.c_str (), GST_PI0_PARAM_PLAYING));
  install (
      PROP_NORM_STATS,
      g_param_spec_string ("norm-stats", "Norm stats",
                           "openpi norm_stats.json (or a directory holding it), or a directory "
                           "with LeRobot's processor files: normalizes the state and "
                           "unnormalizes the actions; default: the checkpoint's own LeRobot "
                           "processor files if it has them, else none (identity)",
                           nullptr, GST_PI0_PARAM_READY));
  install (PROP_NORM_MODE,
           g_param_spec_enum ("norm-mode", "Norm mode",
                              "How openpi norm-stats are applied (pi0: zscore, pi05: quantile); "
                              "LeRobot's processor files name their own",
                              GST_TYPE_PI0_INFER_NORM_MODE, d.norm_mode,
                              GST_PI0_PARAM_READY));
  install (PROP_ACTION_DIMS,
           g_param_spec_int ("action-dims", "Action dims",
                             "The robot's native action dimensions kept from the model's padded "
                             "ones (0 = all)",
                             0, 1024, d.action_dims, GST_PI0_PARAM_READY));
  install (PROP_NUM_STEPS,
           g_param_spec_int ("num-steps", "Denoising steps",
                             "Flow-matching Euler steps per chunk (native Pi0 models)", 1, 1000,
                             d.num_steps, GST_PI0_PARAM_READY));
  install (PROP_PRECISION, g_param_spec_enum ("precision", "Precision",
                                              "Weight precision (fp16 breaks Pi0: not offered)",
                                              GST_TYPE_PI0_INFER_PRECISION, d.precision, GST_PI0_PARAM_READY));
  install (PROP_DEVICE, g_param_spec_enum ("device", "Device", "Where the policy runs",
                                           GST_TYPE_PI0_DEVICE, d.device,
                                           GST_PI0_PARAM_READY));
  /**
   * GstPi0Infer:cuda-device-id:
   *
   * The CUDA device the policy runs on (with device=cuda, or auto with a GPU). -1, auto: device
   * 0, which is where cudaprep's auto puts the tensor. The policy is opened at start, before a
   * tensor says where it is: a tensor on another device is copied to the policy's, with one
   * warning naming both. A device LibTorch does not see fails the start.
   */
  install (PROP_CUDA_DEVICE_ID,
           g_param_spec_int ("cuda-device-id", "CUDA device id",
                             "CUDA device ordinal (-1 = auto: device 0, as cudaprep's auto)", -1,
                             G_MAXINT, d.cuda_device_id, GST_PI0_PARAM_READY));
  /**
   * GstPi0Infer:seed:
   *
   * The flow-matching noise of observation N is drawn from seed + N, so a replay with the
   * same seed gives the same actions.
   */
  install (PROP_SEED,
           g_param_spec_uint64 ("seed", "Seed",
                                "Noise seed: observation N uses seed + N (same seed, same actions)",
                                0, G_MAXUINT64, d.seed, GST_PI0_PARAM_PLAYING));
  install (PROP_REQUIRE_STATE,
           g_param_spec_boolean ("require-state", "Require state",
                                 "Give no actions for observations whose robot state is missing or "
                                 "stale (else a missing state is zeros)",
                                 d.require_state, GST_PI0_PARAM_PLAYING));
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
  install (PROP_RTC,
           g_param_spec_enum ("rtc", "Real-time chunking",
                              "Guide each chunk toward the rest of the chunk being executed (needs "
                              "pi0actionsink downstream)",
                              GST_TYPE_PI0_INFER_RTC, d.rtc, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0Infer:rtc-execution-horizon:
   *
   * The paper's s: the guidance mask ends at row horizon - s of the new chunk. 0 (the default)
   * takes s from the clock: the rows of the executing chunk already due when the new
   * observation was captured, so the mask covers all of the executing chunk that remains. A
   * larger s frees the tail sooner (less smoothing, more reactivity).
   */
  install (
      PROP_RTC_EXECUTION_HORIZON,
      g_param_spec_uint ("rtc-execution-horizon", "RTC execution horizon",
                         "Rows s: guidance ends at row horizon - s (0 = from the clock: the rows "
                         "of the executing chunk already due at the observation)",
                         0, 1000, d.rtc_execution_horizon, GST_PI0_PARAM_PLAYING));
  install (PROP_RTC_MAX_GUIDANCE_WEIGHT,
           g_param_spec_double ("rtc-max-guidance-weight", "RTC maximum guidance weight",
                                "The clip beta of the guidance weight (the paper: 5; with "
                                "rtc=guided-identity use 10)",
                                0.0, 1000.0, d.rtc_max_guidance_weight, GST_PI0_PARAM_PLAYING));
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
  install (PROP_MAX_BATCH_SIZE,
           g_param_spec_uint ("max-batch-size", "Maximum batch size",
                              "Observations run together in one forward pass (1 = each alone)", 1,
                              64, d.max_batch_size, GST_PI0_PARAM_READY));
  /**
   * GstPi0Infer:max-batch-wait:
   *
   * With #GstPi0Infer:max-batch-size above 1: how long (ns, on the pipeline clock) the first
   * held observation waits for others before a partial batch runs. 0: a batch is never waited
   * for (each observation runs as it comes). At most one hour (3600000000000): there is no
   * "wait forever", since a robot waiting for its chunk is never what is meant (a larger value,
   * or -1, is refused by GObject with a warning and the value stays). Adds to the latency the
   * element reports.
   */
  install (PROP_MAX_BATCH_WAIT,
           g_param_spec_uint64 ("max-batch-wait", "Maximum batch wait",
                                "With max-batch-size > 1: ns the first held observation waits for "
                                "more before a partial batch runs (at most 1 hour)",
                                0, kMaxBatchWait, d.max_batch_wait, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0Infer:transforms:
   *
   * openpi's robot transforms of the checkpoint's training config, applied around the norm
   * stats as openpi applies them (the state before normalization, the actions after): `aloha`
   * (pi0_aloha, pi0_aloha_towel, pi0_aloha_tupperware, pi0_aloha_pen_uncap: pi's joint signs and
   * gripper angles, delta joint actions), `aloha_sim` (pi0_aloha_sim: the same with absolute
   * actions), `libero` (pi0_libero: delta arm actions, 7 dims), `libero_absolute` (pi05_libero:
   * absolute, 7 dims), `droid` (pi0_droid, pi05_droid: 8 dims) or `none`. An openpi checkpoint without its transforms makes wrong actions. With transforms,
   * #GstPi0Infer:action-dims is theirs. Unknown names fail at start (docs/checkpoints.md).
   */
  install (PROP_TRANSFORMS,
           g_param_spec_string ("transforms", "Transforms",
                                "openpi's robot transforms of the checkpoint: aloha, aloha_sim, "
                                "libero, libero_absolute, droid or none",
                                d.transforms.c_str (), GST_PI0_PARAM_READY));
  /**
   * GstPi0Infer:discrete-state-input:
   *
   * openpi's `discrete_state_input`, for a pi0.5 checkpoint whose config.json names neither
   * its model type nor this: what openpi's converter writes, since openpi keeps the setting in
   * the training config (`pi05_libero`: `none`, the model sees no state; `pi05_droid`,
   * `pi05_base`: `bins`). `auto` takes pi0.5's default, `bins`. A wrong one gives wrong
   * actions; `pi0-serve`'s presets set it. Checkpoints that declare their type (LeRobot's,
   * gst-pi0's) say it themselves, and it does not apply to them; nor to pi0.
   */
  install (PROP_DISCRETE_STATE_INPUT,
           g_param_spec_enum ("discrete-state-input", "Discrete state input",
                              "openpi's discrete_state_input for a pi0.5 checkpoint that names "
                              "neither its type nor this (openpi's converter): bins "
                              "(pi05_droid, pi05_base) or none (pi05_libero)",
                              GST_TYPE_PI0_INFER_DISCRETE_STATE, d.discrete_state_input,
                              GST_PI0_PARAM_READY));
  install (PROP_MODEL_ID,
           g_param_spec_string ("model-id", "Model id",
                                "Identifies the loaded policy (set in the action meta)", nullptr,
                                GST_PI0_PARAM_READ_ONLY));
  /**
   * GstPi0Infer:stats:
   *
   * `observations`, `chunks`, `skipped-no-state`, `non-finite`, `errors`, `last-error`,
   * `inference-p50-ms`, `inference-p99-ms` (over the last 200 inferences),
   * `inference-total-ms` (time spent inferring since start: divided by the wall time, how busy
   * the policy is), `warmup-ms`; real-time chunking: `rtc-guided` (chunks guided),
   * `rtc-feedback` (pi0-executing events taken), `rtc-feedback-ignored` (refused: malformed,
   * unknown chunk, from the future, row out of range; each with a warning),
   * `rtc-feedback-forgotten` (of those, about a chunk older than the last 16 made), `rtc-delay` and
   * `rtc-prefix-rows` (of the last guided chunk); `forward-passes` (policy calls: one per
   * observation, or one per batch with #GstPi0Infer:max-batch-size above 1); `failed-requests`
   * (served requests whose inference failed: each passes on without actions and its client is
   * told why, while the stream goes on).
   */
  install (PROP_STATS,
           g_param_spec_boxed (
               "stats", "Statistics",
               "Observations, chunks, non-finite, errors, last error, inference time "
               "p50/p99 in ms",
               GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 policy inference", "Filter/Analyzer/Video",
      "Runs a Pi0 policy on each observation and attaches the action chunk as metadata",
      GST_PI0_AUTHOR);

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
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_DISCRETE_STATE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_DEVICE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_NORM_MODE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_INFER_RTC, (GstPluginAPIFlags)0);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_infer_debug, "pi0infer", 0, "Pi0 policy inference");
}

static void
gst_pi0_infer_init (GstPi0Infer *self)
{
  self->priv = new GstPi0InferPrivate (GST_ELEMENT (self));
  gst_base_transform_set_in_place (GST_BASE_TRANSFORM (self), TRUE);
}

static void
gst_pi0_infer_finalize (GObject *object)
{
  GST_PI0_INFER (object)->priv->wait.stop (); /* stop() has, unless the element never started */
  delete GST_PI0_INFER (object)->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* Copies @value into the settings (@set) or out of them: one table for both directions. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING (PROP_MODEL, model)
    GST_PI0_PROP_STRING (PROP_TOKENIZER, tokenizer)
    GST_PI0_PROP_STRING_OR (PROP_INSTRUCTION, instruction)
    GST_PI0_PROP_STRING (PROP_NORM_STATS, norm_stats)
    GST_PI0_PROP_FIELD (PROP_NORM_MODE, norm_mode, gint, enum)
    GST_PI0_PROP_FIELD (PROP_ACTION_DIMS, action_dims, gint, int)
    GST_PI0_PROP_FIELD (PROP_NUM_STEPS, num_steps, gint, int)
    GST_PI0_PROP_FIELD (PROP_PRECISION, precision, gint, enum)
    GST_PI0_PROP_FIELD (PROP_DEVICE, device, gint, enum)
    GST_PI0_PROP_FIELD (PROP_CUDA_DEVICE_ID, cuda_device_id, gint, int)
    GST_PI0_PROP_FIELD (PROP_SEED, seed, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_REQUIRE_STATE, require_state, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_RTC, rtc, gint, enum)
    GST_PI0_PROP_FIELD (PROP_RTC_EXECUTION_HORIZON, rtc_execution_horizon, guint, uint)
    GST_PI0_PROP_FIELD (PROP_RTC_MAX_GUIDANCE_WEIGHT, rtc_max_guidance_weight, gdouble, double)
    GST_PI0_PROP_FIELD (PROP_MAX_BATCH_SIZE, max_batch_size, guint, uint)
    GST_PI0_PROP_FIELD (PROP_MAX_BATCH_WAIT, max_batch_wait, guint64, uint64)
    GST_PI0_PROP_STRING_OR (PROP_TRANSFORMS, transforms)
    GST_PI0_PROP_FIELD (PROP_DISCRETE_STATE_INPUT, discrete_state_input, gint, enum)
  }
  return false;
}

static void
gst_pi0_infer_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  auto priv = GST_PI0_INFER (object)->priv;
  std::lock_guard<std::mutex> lk (priv->settings_lock);
  if (!transfer (priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_infer_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  auto priv = GST_PI0_INFER (object)->priv;
  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, priv->runner.stats ());
  } else if (prop_id == PROP_MODEL_ID) {
    const std::string id = priv->runner.model_id ();
    g_value_set_string (value, id.empty () ? nullptr : id.c_str ());
  } else {
    std::lock_guard<std::mutex> lk (priv->settings_lock);
    if (!transfer (priv->settings, prop_id, value, false))
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  }
}

static Settings
snapshot_settings (GstPi0Infer *self)
{
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  return self->priv->settings;
}

/* ------------------------------------------------------------------------------------------ */
/* Batching (max-batch-size > 1): pi0::Batcher decides, the element waits and pushes           */

static void
unref_items (Batcher::Batch &items)
{
  for (auto &e : items) {
    if (e.item.buf)
      gst_buffer_unref (e.item.buf);
    if (e.item.event)
      gst_event_unref (e.item.event);
    e.item.buf = nullptr;
    e.item.event = nullptr;
  }
}

/* After any change to the batcher: the wait follows its deadline (a new one, on @clock, or none),
 * and a wait in progress for another one ends. */
static void
follow_deadline (GstPi0Infer *self, GstClock *clock)
{
  self->priv->wait.follow (self->priv->batcher.deadline (), clock);
}

/* A served request fails alone (docs/elements/pi0infer.md, "Errors"): its observation passes on
 * without actions, its request meta says why (pi0servesink answers its client with that), and
 * the error becomes a warning (the 1st, 2nd, 4th... of them: a client sending bad requests must
 * not flood the bus), so the server goes on serving every other robot. An observation no client
 * asked for is not a request: false, and its error stops the stream as before. */
static bool
fail_request_alone (GstPi0Infer *self, GstBuffer *buf, pi0::Notices &n)
{
  GstPi0RequestMeta *rm = buf ? gst_buffer_get_pi0_request_meta (buf) : nullptr;
  if (!rm)
    return false;
  const std::string why = n.demote_errors ();
  gst_pi0_request_meta_set_error (rm, why.c_str ());
  const guint64 k = self->priv->runner.count_failed_request ();
  GST_INFO_OBJECT (self, "client %" G_GUINT64_FORMAT " request %" G_GUINT64_FORMAT " failed: %s",
                   rm->client_id, rm->request_id, why.c_str ());
  if ((k & (k - 1)) != 0)
    n.clear ();
  return true;
}

/* The running time at which a chunk leaves: the infer stage of pi0actionsink's latency. */
static void
stamp_done (GstPi0Infer *self, GstBuffer *buf)
{
  if (GstPi0ActionMeta *am = buf ? gst_buffer_get_pi0_action_meta (buf) : nullptr)
    am->done_time = gst_element_get_current_running_time (GST_ELEMENT (self));
}

/* Runs a due batch (pi0::run_batch: those that need the policy in one forward pass; if that
 * throws, each alone, as with max-batch-size=1, so a request the policy refuses fails as it
 * would alone) and pushes it, events included, in input order up to the first observation that
 * failed (its error is posted). Needs the sink pad's stream lock. */
static GstFlowReturn
run_due (GstPi0Infer *self, Batcher::Batch &due)
{
  pi0::infer::Runner &runner = self->priv->runner;
  pi0::Notices n;
  const size_t done = pi0::run_batch (
      due, [&] (const std::vector<Prepared *> &todo) { return runner.infer_together (todo, n); },
      [&] (Prepared &p) {
        return runner.infer_one (p.buf, p, n) || fail_request_alone (self, p.buf, n);
      });
  GST_PI0_POST_NOTICES (self, n);
  GstFlowReturn ret = done < due.size () ? GST_FLOW_ERROR : GST_FLOW_OK;
  GstPad *src = GST_BASE_TRANSFORM_SRC_PAD (self);
  for (size_t i = 0; i < done; i++) {
    Prepared &p = due[i].item;
    GstFlowReturn r = GST_FLOW_OK;
    if (p.event) {
      gst_pad_push_event (src, p.event);
      p.event = nullptr;
    } else {
      stamp_done (self, p.buf);
      r = gst_pad_push (src, p.buf);
      p.buf = nullptr;
    }
    if (r != GST_FLOW_OK) {
      ret = r;
      break;
    }
  }
  unref_items (due);
  return ret;
}

/* The wait ended at @deadline: with the stream lock, and if no observation or event came in
 * the meantime (@generation still current), what is due runs. */
static void
batch_due (GstPi0Infer *self, GstClockTime deadline, guint64 generation)
{
  GstPad *sinkpad = GST_BASE_TRANSFORM_SINK_PAD (self);
  GST_PAD_STREAM_LOCK (sinkpad);
  if (self->priv->wait.current (generation)) {
    Batcher::Batch due = self->priv->batcher.expire (deadline);
    follow_deadline (self, nullptr);
    GstFlowReturn r = run_due (self, due);
    if (r != GST_FLOW_OK)
      GST_DEBUG_OBJECT (self, "pushing a partial batch: %s", gst_flow_get_name (r));
  }
  GST_PAD_STREAM_UNLOCK (sinkpad);
}

static void
batch_start (GstPi0Infer *self, guint size)
{
  auto priv = self->priv;
  Batcher::Batch dropped = priv->batcher.reset (size);
  unref_items (dropped);
  if (size > 1)
    priv->wait.start ("pi0infer-batch", [self] (GstClockTime deadline, guint64 generation) {
      batch_due (self, deadline, generation);
    });
}

static void
batch_stop (GstPi0Infer *self)
{
  auto priv = self->priv;
  priv->wait.stop ();
  Batcher::Batch dropped = priv->batcher.reset (1);
  unref_items (dropped);
}

static GstFlowReturn
gst_pi0_infer_submit_input_buffer (GstBaseTransform *trans, gboolean is_discont, GstBuffer *buf)
{
  auto self = GST_PI0_INFER (trans);
  auto priv = self->priv;
  if (!priv->batcher.batching ())
    return GST_BASE_TRANSFORM_CLASS (parent_class)->submit_input_buffer (trans, is_discont, buf);

  Settings s = snapshot_settings (self);
  Prepared p;
  pi0::Notices n;
  p.buf = gst_buffer_make_writable (buf);
  GstFlowReturn ret = priv->runner.prepare (
      p.buf, s, gst_element_get_current_running_time (GST_ELEMENT (self)), &p, n);
  if (ret == GST_FLOW_ERROR && fail_request_alone (self, p.buf, n)) {
    p.infer = false; /* passes on in its place, without actions */
    ret = GST_FLOW_OK;
  }
  GST_PI0_POST_NOTICES (self, n);
  if (ret != GST_FLOW_OK) {
    gst_buffer_unref (p.buf);
    return ret;
  }
  /* max-batch-wait is on the pipeline clock (the system clock before there is one). */
  GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
  if (!clock)
    clock = gst_system_clock_obtain ();
  const bool infer = p.infer;
  Batcher::Batch due = priv->batcher.observation (std::move (p), infer, gst_clock_get_time (clock),
                                                  s.max_batch_wait);
  follow_deadline (self, clock);
  gst_object_unref (clock);
  return run_due (self, due);
}

static GstFlowReturn
gst_pi0_infer_generate_output (GstBaseTransform *trans, GstBuffer **outbuf)
{
  auto self = GST_PI0_INFER (trans);
  if (!self->priv->batcher.batching ())
    return GST_BASE_TRANSFORM_CLASS (parent_class)->generate_output (trans, outbuf);
  *outbuf = nullptr; /* batching pushes the buffers itself, in order */
  return GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Lifecycle, caps, events, queries, buffers                                                   */

static gboolean
gst_pi0_infer_start (GstBaseTransform *trans)
{
  auto self = GST_PI0_INFER (trans);
  Settings s = snapshot_settings (self);
  pi0::Notices n;
  const bool ok = self->priv->runner.open (s, n);
  GST_PI0_POST_NOTICES (self, n);
  if (!ok)
    return FALSE;
  batch_start (self, s.max_batch_size);
  return TRUE;
}

static gboolean
gst_pi0_infer_stop (GstBaseTransform *trans)
{
  batch_stop (GST_PI0_INFER (trans)); /* before the policy goes: the wait thread may use it */
  GST_PI0_INFER (trans)->priv->runner.close ();
  return TRUE;
}

static gboolean
gst_pi0_infer_set_caps (GstBaseTransform *trans, GstCaps *incaps, GstCaps *outcaps)
{
  auto self = GST_PI0_INFER (trans);
  const GstStructure *st = gst_caps_get_structure (incaps, 0);
  gint views = 0;

  if (!self->priv->runner.policy ())
    return TRUE;
  int slots = self->priv->runner.policy ()->spec ().num_views;
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
  auto priv = self->priv;
  const gchar *text = nullptr;

  /* Serialized, so it applies from the next observation exactly. */
  if (gst_pi0_instruction_event_parse (event, &text)) {
    GST_INFO_OBJECT (self, "instruction from the stream: \"%s\"", text);
    {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.instruction = text;
    }
    g_object_notify (G_OBJECT (self), "instruction");
    /* Batching: held observations have their instruction already; the event waits with them,
     * to reach downstream between the same buffers. */
    Prepared p;
    p.event = event;
    if (priv->batcher.hold_in_place (p))
      return TRUE;
  } else if (priv->batcher.batching () && GST_EVENT_IS_SERIALIZED (event)) {
    /* (FLUSH_STOP included; these come with the stream lock.) */
    Batcher::Batch held = priv->batcher.take ();
    follow_deadline (self, nullptr);
    if (GST_EVENT_TYPE (event) == GST_EVENT_FLUSH_STOP) {
      unref_items (held);
    } else { /* EOS, segment, caps...: the held run first */
      GstFlowReturn r = run_due (self, held);
      if (r != GST_FLOW_OK)
        GST_DEBUG_OBJECT (self, "pushing the held batch before %s: %s", GST_EVENT_TYPE_NAME (event),
                          gst_flow_get_name (r));
    }
  }
  GstPi0EpisodeAction episode;
  if (gst_pi0_episode_event_parse (event, &episode, nullptr) && episode == GST_PI0_EPISODE_START) {
    /* Serialized, and after the held batch ran (above): no chunk made from here on is guided
     * toward one of the last episode's. */
    GST_INFO_OBJECT (self, "an episode starts: real-time chunking forgets the chunks made before");
    priv->runner.new_episode ();
  }
  return GST_BASE_TRANSFORM_CLASS (parent_class)->sink_event (trans, event);
}

static gboolean
gst_pi0_infer_src_event (GstBaseTransform *trans, GstEvent *event)
{
  if (GST_EVENT_TYPE (event) == GST_EVENT_CUSTOM_UPSTREAM &&
      gst_event_has_name (event, GST_PI0_EXECUTING_EVENT_NAME)) {
    pi0::Notices n;
    GST_PI0_INFER (trans)->priv->runner.feedback (
        event, gst_element_get_current_running_time (GST_ELEMENT (trans)), n);
    GST_PI0_POST_NOTICES (trans, n);
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
    GstClockTime ours = self->priv->runner.processing_time ();
    Settings st = snapshot_settings (self);
    if (st.max_batch_size > 1) /* a held observation may wait this long for a batch */
      ours += st.max_batch_wait;
    min += ours;
    if (GST_CLOCK_TIME_IS_VALID (max))
      max += ours;
    GST_DEBUG_OBJECT (self, "adding %" GST_TIME_FORMAT " of processing latency",
                      GST_TIME_ARGS (ours));
    gst_query_set_latency (query, live, min, max);
  }
  return TRUE;
}

static GstFlowReturn
gst_pi0_infer_transform_ip (GstBaseTransform *trans, GstBuffer *buf)
{
  auto self = GST_PI0_INFER (trans);
  Settings s = snapshot_settings (self);
  Prepared p;
  pi0::Notices n;
  GstFlowReturn ret = self->priv->runner.prepare (
      buf, s, gst_element_get_current_running_time (GST_ELEMENT (self)), &p, n);
  if (ret == GST_FLOW_OK && p.infer && !self->priv->runner.infer_one (buf, p, n))
    ret = GST_FLOW_ERROR;
  if (ret == GST_FLOW_ERROR && fail_request_alone (self, buf, n))
    ret = GST_FLOW_OK;
  GST_PI0_POST_NOTICES (self, n);
  stamp_done (self, buf);
  return ret;
}
