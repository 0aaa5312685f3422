/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/infer/pi0inferrunner.h"
#include "gst/common/pi0percentile.h"

#include <ATen/ATen.h>

#include <chrono>

/* The element's category: these are its messages. */
GST_DEBUG_CATEGORY_EXTERN (gst_pi0_infer_debug);
#define GST_CAT_DEFAULT gst_pi0_infer_debug

/* The property's values are open_policy()'s, in one order: a precision copies straight across. */
static_assert ((int)pi0::PrecisionChoice::Auto == GST_PI0_INFER_PRECISION_AUTO &&
                   (int)pi0::PrecisionChoice::Bf16 == GST_PI0_INFER_PRECISION_BF16 &&
                   (int)pi0::PrecisionChoice::Fp32 == GST_PI0_INFER_PRECISION_FP32,
               "pi0infer's precision enum and pi0::PrecisionChoice differ");

/* The tracker takes the pipeline's running times as they are. */
static_assert (pi0::RtcTracker::kTimeNone == GST_CLOCK_TIME_NONE, "one 'no time' for both");

namespace pi0::infer
{

namespace
{

/* Where the builtin models find their bundled tokenizer: $PI0_DATA_DIR, the installed data
 * directory, then the source tree (uninstalled runs and the tests). */
std::vector<std::string>
data_dirs ()
{
  std::vector<std::string> dirs;
  if (const gchar *d = g_getenv ("PI0_DATA_DIR"))
    dirs.push_back (d);
  dirs.push_back (PI0_DATADIR);
  dirs.push_back (PI0_SOURCE_DATADIR);
  return dirs;
}

pi0::OpenOptions
open_options (const Settings &s)
{
  pi0::OpenOptions o;
  o.device = s.device == GST_PI0_DEVICE_CUDA  ? pi0::DeviceChoice::Cuda
             : s.device == GST_PI0_DEVICE_CPU ? pi0::DeviceChoice::Cpu
                                              : pi0::DeviceChoice::Auto;
  /* auto (-1): the first device, which is where cudaprep's auto puts the tensor; the policy is
   * opened at start, before any tensor says where it is. */
  o.cuda_device_id = s.cuda_device_id < 0 ? 0 : s.cuda_device_id;
  o.precision = (pi0::PrecisionChoice)s.precision;
  o.num_steps = s.num_steps;
  o.tokenizer = s.tokenizer;
  o.data_dirs = data_dirs ();
  o.norm_stats = s.norm_stats;
  o.norm_mode = s.norm_mode == GST_PI0_INFER_NORM_MODE_QUANTILE ? pi0::NormMode::Quantile
                                                                : pi0::NormMode::ZScore;
  o.action_dims = s.action_dims;
  o.transforms = s.transforms;
  if (s.discrete_state_input != GST_PI0_INFER_DISCRETE_STATE_AUTO)
    o.discrete_state_input = s.discrete_state_input == GST_PI0_INFER_DISCRETE_STATE_BINS;
  return o;
}

/* An OpenError as the error the user can act on, in its domain. */
void
open_error (const pi0::OpenError &e, Notices &n)
{
  using Kind = pi0::OpenError::Kind;
  switch (e.kind ()) {
    case Kind::NotFound:
      n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, e.what ());
      break;
    case Kind::Settings:
      n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS, e.what ());
      break;
    case Kind::Unreadable:
      n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ, e.what ());
      break;
    case Kind::Library:
      n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT, e.what ());
      break;
  }
}

double
ms_since (std::chrono::steady_clock::time_point t0)
{
  return std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
      .count ();
}

at::ScalarType
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
void
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

} // namespace

/* ------------------------------------------------------------------------------------------ */
/* Opening                                                                                     */

bool
Runner::open (const Settings &s, Notices &n)
{
  if (s.model.empty ()) {
    n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS,
             "No model: set model= to a checkpoint directory, a model.safetensors, a TorchScript "
             "file, or builtin:pi0-tiny (an untrained demo model).");
    return false;
  }

  std::unique_ptr<pi0::OpenedPolicy> policy;
  try {
    policy = pi0::open_policy (s.model, open_options (s));
  } catch (const pi0::OpenError &e) {
    open_error (e, n);
    return false;
  } catch (const std::exception &e) {
    n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT, "Could not load model '" + s.model + "'.",
             e.what ());
    return false;
  }

  /* One blank observation through the whole path now: a broken policy fails here, before any
   * observation, and the first real one is not slow (on CUDA the graph is captured now). */
  auto t0 = std::chrono::steady_clock::now ();
  bool warmed = false;
  try {
    warmed = policy->warmup ();
  } catch (const c10::Error &e) {
    n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT,
             std::string ("The model failed its warm-up run: ") + e.what_without_backtrace ());
    return false;
  } catch (const std::exception &e) {
    n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT,
             std::string ("The model failed its warm-up run: ") + e.what ());
    return false;
  }
  double warm_ms = ms_since (t0);
  /* An execution horizon longer than the chunk would guide nothing: a mistake, said now. */
  const int horizon = policy->spec ().horizon;
  if (s.rtc != GST_PI0_INFER_RTC_OFF && policy->supports_guidance () && horizon > 0 &&
      s.rtc_execution_horizon > (guint)horizon) {
    n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS,
             strf ("rtc-execution-horizon=%u is more than the %d rows of this model's chunk "
                   "(at most %d; 0 takes it from the clock).",
                   s.rtc_execution_horizon, horizon, horizon),
             policy->describe ());
    return false;
  }
  if (!warmed)
    GST_WARNING_OBJECT (log_,
                        "no warm-up run: the model does not declare num_views, image_size and "
                        "state_dim, so it first runs on the first observation");
  GST_INFO_OBJECT (log_, "loaded %s: %s (warm-up %.1f ms)", policy->model_id ().c_str (),
                   policy->describe ().c_str (), warm_ms);

  {
    std::lock_guard<std::mutex> lk (stats_lock_);
    stats_ = Stats ();
    stats_.warmup_ms = warm_ms;
    model_id_ = policy->model_id ();
  }
  warned_no_state_ = warned_truncated_ = warned_rtc_unsupported_ = warned_state_ignored_ = false;
  warned_device_ = false;
  warned_execution_horizon_ = 0;
  rtc_.reset ();
  policy_ = std::move (policy);
  return true;
}

void
Runner::close ()
{
  policy_.reset ();
  warned_no_state_ = warned_truncated_ = warned_rtc_unsupported_ = warned_state_ignored_ = false;
  warned_device_ = false;
}

/* ------------------------------------------------------------------------------------------ */
/* Stats                                                                                       */

Runner::Stats
Runner::snapshot () const
{
  std::lock_guard<std::mutex> lk (stats_lock_);
  return stats_;
}

GstStructure *
Runner::stats () const
{
  Stats s = snapshot ();
  std::vector<double> lat (s.latencies_ms.begin (), s.latencies_ms.end ());
  return gst_structure_new (
      "pi0infer-stats", "observations", G_TYPE_UINT64, s.observations, "chunks", G_TYPE_UINT64,
      s.chunks, "skipped-no-state", G_TYPE_UINT64, s.skipped_state, "non-finite", G_TYPE_UINT64,
      s.non_finite, "errors", G_TYPE_UINT64, s.errors, "last-error", G_TYPE_STRING,
      s.last_error.c_str (), "inference-p50-ms", G_TYPE_DOUBLE, pi0::percentile (lat, 0.5),
      "inference-p99-ms", G_TYPE_DOUBLE, pi0::percentile (lat, 0.99), "inference-total-ms",
      G_TYPE_DOUBLE, s.total_ms, "warmup-ms", G_TYPE_DOUBLE, s.warmup_ms, "rtc-guided",
      G_TYPE_UINT64, s.rtc_guided, "rtc-feedback", G_TYPE_UINT64, s.rtc_feedback,
      "rtc-feedback-ignored", G_TYPE_UINT64, s.rtc_feedback_ignored, "rtc-feedback-forgotten",
      G_TYPE_UINT64, s.rtc_feedback_forgotten, "rtc-delay", G_TYPE_UINT64, s.rtc_delay,
      "rtc-prefix-rows", G_TYPE_UINT64, s.rtc_prefix_rows, "forward-passes", G_TYPE_UINT64,
      s.passes, "failed-requests", G_TYPE_UINT64, s.failed_requests, nullptr);
}

std::string
Runner::model_id () const
{
  std::lock_guard<std::mutex> lk (stats_lock_);
  return model_id_;
}

GstClockTime
Runner::processing_time () const
{
  Stats s = snapshot ();
  std::vector<double> lat (s.latencies_ms.begin (), s.latencies_ms.end ());
  const double p99 = pi0::percentile (lat, 0.99);
  return (GstClockTime)((p99 > 0 ? p99 : s.warmup_ms) * GST_MSECOND);
}

void
Runner::record_error (const std::string &what)
{
  std::lock_guard<std::mutex> lk (stats_lock_);
  stats_.errors++;
  stats_.last_error = what;
}

guint64
Runner::count_failed_request ()
{
  std::lock_guard<std::mutex> lk (stats_lock_);
  return ++stats_.failed_requests;
}

void
Runner::count_pass ()
{
  std::lock_guard<std::mutex> lk (stats_lock_);
  stats_.passes++;
}

/* ------------------------------------------------------------------------------------------ */
/* Observations                                                                                */

GstFlowReturn
Runner::prepare (GstBuffer *buf, const Settings &s, GstClockTime now, Prepared *p, Notices &n)
{
  pi0::OpenedPolicy *policy = policy_.get ();

  {
    std::lock_guard<std::mutex> lk (stats_lock_);
    stats_.observations++;
  }
  if (!policy) {
    n.error (GST_CORE_ERROR, GST_CORE_ERROR_FAILED, "No model loaded.");
    return GST_FLOW_ERROR;
  }

  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (buf);
  GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (buf);
  if (!tm || !om) {
    n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT,
             strf ("An observation without %s reached pi0infer: put pi0viewmux and cudaprep "
                   "before it.",
                   !tm ? "a model input tensor (GstPi0TensorMeta)" : "an observation meta"),
             strf ("%" GST_PTR_FORMAT, buf));
    return GST_FLOW_ERROR;
  }

  const pi0::PolicySpec &spec = policy->spec ();
  if (tm->n_dims != 4 || tm->shape[1] != 3 ||
      (spec.image_size > 0 &&
       (tm->shape[2] != spec.image_size || tm->shape[3] != spec.image_size)) ||
      (spec.num_views > 0 && tm->shape[0] > spec.num_views) || tm->dtype == GST_PI0_DTYPE_UINT8) {
    n.error (GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
             strf ("The model takes up to %d views of 3x%dx%d float images, but the input tensor "
                   "is [%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT
                   ",%" G_GINT64_FORMAT "] %s: set cudaprep width=%d height=%d.",
                   spec.num_views, spec.image_size, spec.image_size, tm->shape[0], tm->shape[1],
                   tm->shape[2], tm->shape[3], gst_pi0_dtype_to_string (tm->dtype), spec.image_size,
                   spec.image_size));
    return GST_FLOW_NOT_NEGOTIATED;
  }

  /* No state: no actions, unless the user said a missing state is zeros. pi0.5 reads the state
   * as prompt bins: a made-up (zero) state would be a wrong prompt, not a neutral one, so
   * require-state=false does not apply to it. */
  guint state_dim = 0;
  const gfloat *state = gst_pi0_observation_meta_get_state (om, &state_dim);
  bool stale = (om->state_flags & GST_PI0_STATE_FLAG_STALE) != 0;
  if ((!state || stale) && (s.require_state || spec.state_in_prompt)) {
    {
      std::lock_guard<std::mutex> lk (stats_lock_);
      stats_.skipped_state++;
    }
    if (!warned_no_state_) {
      warned_no_state_ = true;
      const char *what = state ? "a stale" : "no";
      n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
                 s.require_state
                     ? strf ("Observation %" G_GUINT64_FORMAT " has %s robot state: no actions "
                             "for it (set require-state=false to use zeros).",
                             om->sequence, what)
                     : strf ("Observation %" G_GUINT64_FORMAT " has %s robot state, and this %s "
                             "model reads the state in its prompt: no actions for it "
                             "(require-state=false does not make up a state for it).",
                             om->sequence, what, spec.model_type.c_str ()));
    }
    return GST_FLOW_OK;
  }
  if (state && !spec.reads_state && !warned_state_ignored_) {
    warned_state_ignored_ = true;
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
               "The robot state is connected, but this checkpoint reads no state (a pi05 model "
               "with discrete_state_input false, as openpi's pi05_libero): it is ignored.",
               policy->describe ());
  }
  /* Works, but every observation crosses between the devices: said once, with the fix. */
  const c10::Device pd = policy->device ();
  if (tm->device == GST_PI0_DEVICE_CUDA && pd.is_cuda () && pd.index () != (int)tm->device_id &&
      !warned_device_) {
    warned_device_ = true;
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
               strf ("The input tensor is on CUDA device %d but the policy runs on device %d: "
                     "each observation is copied between them (set cuda-device-id=%d here, or "
                     "cudaprep's to %d).",
                     (int)tm->device_id, (int)pd.index (), (int)tm->device_id, (int)pd.index ()));
  }
  if (spec.state_dim > 0 && (int)state_dim > spec.state_dim) {
    n.error (GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
             strf ("The robot state has %u values but the model takes at most %d.", state_dim,
                   spec.state_dim));
    return GST_FLOW_NOT_NEGOTIATED;
  }

  double last_ms = 0;
  {
    std::lock_guard<std::mutex> lk (stats_lock_);
    if (!stats_.latencies_ms.empty ())
      last_ms = stats_.latencies_ms.back ();
  }
  p->sequence = om->sequence;
  p->observation_time = om->observation_time;
  /* A server's request brings its client's prompt and seed (pi0servesrc computed it); a camera's
   * observation N takes the instruction and seed + N. */
  const GstPi0RequestMeta *rm = gst_buffer_get_pi0_request_meta (buf);
  p->instruction = rm ? std::string (rm->prompt ? rm->prompt : "") : s.instruction;
  try {
    pi0::Request &rq = p->rq;
    request_images (tm, &rq);
    if (state)
      rq.state = at::from_blob ((void *)state, {(int64_t)state_dim}, at::kFloat).clone ();
    rq.prompt = p->instruction;
    rq.seed = rm ? rm->seed : s.seed + om->sequence;
    if (s.rtc != GST_PI0_INFER_RTC_OFF) {
      if (!policy->supports_guidance ()) {
        if (!warned_rtc_unsupported_) {
          warned_rtc_unsupported_ = true;
          n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
                     "rtc is on but this policy cannot be guided (TorchScript): chunks are "
                     "sampled unguided.",
                     policy->describe ());
        }
      } else {
        /* Set above the chunk while playing (open() refuses it at start): the chunk's length,
         * which guides nothing, said once per value instead of a failure per chunk. */
        guint execution_horizon = s.rtc_execution_horizon;
        const guint rows = (guint)std::max (policy->spec ().horizon, 0);
        if (rows > 0 && execution_horizon > rows) {
          if (warned_execution_horizon_ != execution_horizon) {
            warned_execution_horizon_ = execution_horizon;
            n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
                       strf ("rtc-execution-horizon=%u is more than the %u rows of a chunk: "
                             "using %u, which guides no row.",
                             execution_horizon, rows, rows),
                       policy->describe ());
          }
          execution_horizon = rows;
        }
        /* docs/rtc.md, "In the chain": the prefix, the delay and the horizon. */
        p->guided = rtc_.guidance (om->observation_time, now, last_ms, execution_horizon,
                                   s.rtc_max_guidance_weight,
                                   s.rtc == GST_PI0_INFER_RTC_GUIDED_IDENTITY, &rq.guidance);
      }
    }
  } catch (const std::exception &e) {
    record_error (e.what ());
    n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
             strf ("Inference failed on observation %" G_GUINT64_FORMAT ": %s", om->sequence,
                   e.what ()));
    return GST_FLOW_ERROR;
  }
  p->infer = true;
  return GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Inference                                                                                   */

bool
Runner::infer_one (GstBuffer *buf, Prepared &p, Notices &n)
{
  pi0::OpenedPolicy *policy = policy_.get ();
  auto t0 = std::chrono::steady_clock::now ();
  pi0::Response response;
  count_pass ();
  try {
    if (p.guided) {
      try {
        response = policy->infer (p.rq);
      } catch (const pi0::Error &e) {
        /* A prefix the model refuses: this chunk unguided, said once per occurrence. */
        n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
                   strf ("Real-time chunking failed on observation %" G_GUINT64_FORMAT
                         ": sampled unguided.",
                         p.sequence),
                   e.what ());
        p.guided = false;
        p.rq.guidance = pi0::PolicyGuidance ();
        response = policy->infer (p.rq);
      }
    } else {
      response = policy->infer (p.rq);
    }
  } catch (const c10::Error &e) {
    record_error (e.what_without_backtrace ());
    n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
             strf ("Inference failed on observation %" G_GUINT64_FORMAT ".", p.sequence),
             std::string ("LibTorch: ") + e.what_without_backtrace ());
    return false;
  } catch (const std::exception &e) {
    record_error (e.what ());
    n.error (
        GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
        strf ("Inference failed on observation %" G_GUINT64_FORMAT ": %s", p.sequence, e.what ()));
    return false;
  }
  double ms = ms_since (t0);
  attach (buf, p, response, ms, ms, n);
  return true;
}

bool
Runner::infer_together (const std::vector<Prepared *> &todo, Notices &n)
{
  std::vector<pi0::Request> rqs;
  for (Prepared *p : todo)
    rqs.push_back (p->rq);
  auto t0 = std::chrono::steady_clock::now ();
  std::vector<pi0::Response> responses;
  try {
    count_pass ();
    responses = policy_->infer (rqs);
  } catch (const std::exception &e) {
    GST_DEBUG_OBJECT (log_, "a batch of %zu failed (%s): each runs alone", todo.size (), e.what ());
    return false;
  }
  double ms = ms_since (t0);
  /* The policy's time counts once, with the first chunk. */
  for (size_t i = 0; i < todo.size (); i++)
    attach (todo[i]->buf, *todo[i], responses[i], ms, i == 0 ? ms : 0.0, n);
  GST_LOG_OBJECT (log_, "%zu observations in one pass: %.2f ms", todo.size (), ms);
  return true;
}

/* The chunk onto its buffer as a GstPi0ActionMeta, the stats (@busy_ms: the policy's time this
 * chunk adds, 0 for the 2nd.. chunk of a batch), and the chunk into the real-time chunking
 * history. */
void
Runner::attach (GstBuffer *buf, Prepared &p, const pi0::Response &response, double ms,
                double busy_ms, Notices &n)
{
  pi0::OpenedPolicy *policy = policy_.get ();
  if (p.guided) {
    std::lock_guard<std::mutex> lk (stats_lock_);
    stats_.rtc_guided++;
    stats_.rtc_delay = (guint64)p.rq.guidance.delay;
    stats_.rtc_prefix_rows = (guint64)p.rq.guidance.prefix.size (0);
  }
  if (response.prompt_truncated && !warned_truncated_) {
    warned_truncated_ = true;
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
               strf ("The instruction needs more than the model's %d tokens: it was cut.",
                     policy->prompt_length ()),
               "instruction \"" + p.instruction + "\"");
  }
  const at::Tensor &actions = response.actions;
  GstPi0ActionMeta *am =
      gst_buffer_add_pi0_action_meta (buf, (guint)actions.size (0), (guint)actions.size (1),
                                      actions.data_ptr<float> (), policy->model_id ().c_str ());
  am->sequence = p.sequence;
  am->observation_time = p.observation_time;
  am->inference_time = (GstClockTime)(ms * GST_MSECOND);
  am->model_time = (GstClockTime)(response.model_ms * GST_MSECOND);
  if (policy->untrained ())
    am->flags = (GstPi0ActionFlags)(am->flags | GST_PI0_ACTION_FLAG_UNTRAINED);
  bool finite = !(am->flags & GST_PI0_ACTION_FLAG_NON_FINITE);

  {
    std::lock_guard<std::mutex> lk (stats_lock_);
    stats_.chunks++;
    if (!finite)
      stats_.non_finite++;
    stats_.latencies_ms.push_back (ms);
    stats_.total_ms += busy_ms;
    if (stats_.latencies_ms.size () > kLatencyWindow)
      stats_.latencies_ms.pop_front ();
  }
  if (!finite)
    GST_WARNING_OBJECT (log_, "observation %" G_GUINT64_FORMAT ": non-finite actions (flagged)",
                        p.sequence);
  else {
    /* Kept for real-time chunking: the sink may now execute it. A non-finite chunk is never
     * executed, so it is never a prefix. */
    rtc_.chunk_made (am->sequence, am->observation_time, am->horizon, am->dim, am->actions);
  }
  GST_LOG_OBJECT (log_, "observation %" G_GUINT64_FORMAT ": %ux%u actions in %.2f ms", p.sequence,
                  am->horizon, am->dim, ms);
}

/* ------------------------------------------------------------------------------------------ */
/* Real-time chunking feedback                                                                 */

/* A pi0-executing event refused: counted, logged, and posted as a warning for the 1st, 2nd,
 * 4th, 8th... (a sink gone wrong must not flood the bus). Nothing else changes. */
void
Runner::ignore_feedback (const std::string &why, Notices &n)
{
  guint64 k;
  {
    std::lock_guard<std::mutex> lk (stats_lock_);
    k = ++stats_.rtc_feedback_ignored;
  }
  GST_WARNING_OBJECT (log_, "pi0-executing ignored: %s", why.c_str ());
  if ((k & (k - 1)) == 0)
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
               strf ("Feedback from the sink ignored: %s (%" G_GUINT64_FORMAT " so far).",
                     why.c_str (), k));
}

/* What the sink says the robot executes. Checked before anything is kept: a malformed event, a
 * chunk this element did not make (or no longer remembers), a row beyond the chunk, a time in
 * the future of our clock: ignored with a warning. */
void
Runner::feedback (GstEvent *event, GstClockTime now, Notices &n)
{
  guint64 chunk_id = 0, period = 0;
  guint row = 0;
  GstClockTime time = GST_CLOCK_TIME_NONE;
  if (!gst_pi0_executing_event_parse (event, &chunk_id, &row, &time, &period)) {
    gchar *str = gst_structure_to_string (gst_event_get_structure (event));
    std::string why = std::string ("malformed event ") + str;
    g_free (str);
    ignore_feedback (why, n);
    return;
  }
  bool forgotten = false;
  const std::string why = rtc_.feedback (chunk_id, row, time, period, now, &forgotten);
  if (!why.empty ()) {
    if (forgotten) {
      std::lock_guard<std::mutex> lk (stats_lock_);
      stats_.rtc_feedback_forgotten++;
    }
    ignore_feedback (why, n);
    return;
  }
  std::lock_guard<std::mutex> lk (stats_lock_);
  stats_.rtc_feedback++;
}

} // namespace pi0::infer
