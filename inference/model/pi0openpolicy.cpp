/* open_policy() and OpenedPolicy: URI resolution, tokenizer, norm stats and transforms, the
 * request path. */
#include "inference/model/pi0openpolicy.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>

#include "common/pi0file.h"
#include "inference/model/pi0config.h"
#include "inference/model/pi0cudasupport.h"
#include "inference/model/pi0model.h"

namespace pi0
{

namespace
{

using Kind = OpenError::Kind;

/* Distinct prompts kept tokenized; past this the cache starts over (one robot rarely has more
 * tasks, and a server's clients re-tokenize at worst once per request). */
constexpr size_t kTokenCacheSize = 64;

bool
ends_with (const std::string &s, const char *suffix)
{
  const std::string x (suffix);
  return s.size () >= x.size () && s.compare (s.size () - x.size (), x.size (), x) == 0;
}

bool
is_torchscript (const std::string &p)
{
  return ends_with (p, ".pt") || ends_with (p, ".ts") || ends_with (p, ".torchscript");
}

PolicyOptions
policy_options (const OpenOptions &o)
{
  const bool have_cuda = cuda_available ();
  if (o.device == DeviceChoice::Cuda && !have_cuda)
    throw OpenError (Kind::Library, "CUDA was asked for, but LibTorch finds no usable CUDA device "
                                    "(run on the CPU, or let the device be chosen: auto).");
  const bool cuda = o.device == DeviceChoice::Cuda || (o.device == DeviceChoice::Auto && have_cuda);
  PolicyOptions po;
  po.device = c10::Device (c10::kCPU);
  if (cuda) {
    /* c10's device index is 8 bits: an id past the devices must not wrap onto one of them. */
    const int id = o.cuda_device_id, n = (int)at::getNumGPUs ();
    if (id < 0 || id >= n)
      throw OpenError (Kind::Library, "CUDA device " + std::to_string (id) +
                                          " was asked for, but LibTorch sees " +
                                          std::to_string (n) + " CUDA device(s), numbered from 0.");
    po.device = c10::Device (c10::kCUDA, (c10::DeviceIndex)id);
  }
  po.dtype = o.precision == PrecisionChoice::Bf16 || (o.precision == PrecisionChoice::Auto && cuda)
                 ? at::kBFloat16
                 : at::kFloat;
  po.cuda_graph = o.cuda_graph;
  return po;
}

/* The backend for @uri; sets *model_id, *untrained and, when the model names one, *tokenizer
 * (only if the file is there). Every failure is an OpenError. */
std::unique_ptr<Policy>
open_backend (const std::string &uri, const OpenOptions &o, const PolicyOptions &po,
              std::string *model_id, bool *untrained, std::string *tokenizer)
{
  try {
    if (uri.rfind ("builtin:", 0) == 0) {
      const std::string name = uri.substr (8);
      if (name != "pi0-tiny" && name != "pi0" && name != "pi05-tiny" && name != "pi05")
        throw OpenError (Kind::NotFound, "Unknown builtin model '" + uri +
                                             "': the builtins are builtin:pi0-tiny, builtin:pi0, "
                                             "builtin:pi05-tiny and builtin:pi05.");
      Pi0Config cfg = config_by_name (name);
      if (o.num_steps > 0)
        cfg.num_steps = o.num_steps;
      auto model = std::make_shared<Pi0Model> (cfg);
      model->init_random (0); // fixed weights: the demo is the same model everywhere
      *model_id = uri + " (untrained, random weights)";
      *untrained = true;
      for (const auto &d : o.data_dirs) {
        if (path_exists (d + "/tiny_paligemma.model")) {
          *tokenizer = d + "/tiny_paligemma.model";
          break;
        }
      }
      return make_pi0_policy (model, po);
    }
    if (!path_exists (uri))
      throw OpenError (Kind::NotFound, "Model '" + uri + "' does not exist.");
    *model_id = uri;
    if (is_directory (uri) || ends_with (uri, ".safetensors")) {
      auto model = load_pi0_model (uri, o.num_steps, o.discrete_state_input);
      const std::string &named = model->config ().tokenizer;
      if (!named.empty ()) {
        std::string path =
            named[0] == '/' ? named : (is_directory (uri) ? uri : parent_dir (uri)) + "/" + named;
        if (path_exists (path))
          *tokenizer = path;
      }
      return make_pi0_policy (model, po);
    }
    if (is_torchscript (uri))
      return load_torchscript_policy (uri, po);
    throw OpenError (Kind::Settings, "Model '" + uri +
                                         "' is neither a checkpoint directory, a .safetensors "
                                         "file nor a TorchScript file (.pt, .ts, .torchscript).");
  } catch (const OpenError &) {
    throw;
  } catch (const Error &e) {
    throw OpenError (Kind::Unreadable, "Could not load model '" + uri + "': " + e.what ());
  } catch (const c10::Error &e) {
    throw OpenError (Kind::Library,
                     "LibTorch could not load model '" + uri + "': " + e.what_without_backtrace ());
  } catch (const std::exception &e) {
    throw OpenError (Kind::Library, "Could not load model '" + uri + "': " + e.what ());
  }
}

} // namespace

std::unique_ptr<OpenedPolicy>
open_policy (const std::string &uri, const OpenOptions &o)
{
  if (uri.empty ())
    throw OpenError (Kind::Settings, "No model: give a checkpoint directory, a model.safetensors, "
                                     "a TorchScript file, or builtin:pi0-tiny (an untrained demo "
                                     "model).");
  const PolicyOptions po = policy_options (o);
  std::unique_ptr<OpenedPolicy> p (new OpenedPolicy ());
  std::string tokenizer;
  p->policy_ = open_backend (uri, o, po, &p->model_id_, &p->untrained_, &tokenizer);
  if (!o.tokenizer.empty ())
    tokenizer = o.tokenizer;

  if (tokenizer.empty ())
    throw OpenError (Kind::Settings, "No tokenizer for model '" + uri +
                                         "': set the tokenizer to its SentencePiece model (the "
                                         "PaliGemma tokenizer).");
  try {
    p->tokenizer_ = Tokenizer::load (tokenizer);
  } catch (const std::exception &e) {
    throw OpenError (Kind::Unreadable,
                     "Could not load tokenizer '" + tokenizer + "': " + std::string (e.what ()));
  }

  /* LeRobot's processor files: named by norm_stats, or beside the checkpoint's weights. */
  std::string processors;
  if (!o.norm_stats.empty ()) {
    if (ends_with (o.norm_stats, "/policy_preprocessor.json"))
      processors = parent_dir (o.norm_stats);
    else if (is_directory (o.norm_stats) && !path_exists (o.norm_stats + "/norm_stats.json") &&
             has_lerobot_processors (o.norm_stats))
      processors = o.norm_stats;
  } else if (!is_torchscript (uri) && uri.rfind ("builtin:", 0) != 0) {
    const std::string dir = is_directory (uri) ? uri : parent_dir (uri);
    if (has_lerobot_processors (dir))
      processors = dir;
  }
  int lerobot_action_dims = 0;
  if (!processors.empty ()) {
    try {
      LeRobotProcessors lp = load_lerobot_processors (processors);
      p->norm_ = std::make_unique<NormStats> (std::move (lp.stats));
      p->lerobot_newline_ = lp.appends_newline;
      lerobot_action_dims = lp.action_dims;
      if (lp.state_in_prompt != p->policy_->spec ().state_in_prompt)
        throw Error (std::string ("the processors ") +
                     (lp.state_in_prompt ? "put the state into the prompt (pi05)"
                                         : "do not put the state into the prompt (pi0)") +
                     ", the model is " + p->policy_->spec ().model_type);
    } catch (const std::exception &e) {
      throw OpenError (Kind::Unreadable, "Could not load LeRobot's processor files in '" +
                                             processors + "': " + std::string (e.what ()));
    }
    p->norm_mode_ = p->norm_->state_mode ().value_or (o.norm_mode);
    p->action_norm_mode_ = p->norm_->action_mode ().value_or (o.norm_mode);
  } else if (!o.norm_stats.empty ()) {
    try {
      p->norm_ = std::make_unique<NormStats> (NormStats::load (o.norm_stats));
    } catch (const std::exception &e) {
      throw OpenError (Kind::Unreadable, "Could not load norm stats '" + o.norm_stats +
                                             "': " + std::string (e.what ()));
    }
    p->norm_mode_ = p->action_norm_mode_ = o.norm_mode;
  }

  try {
    p->transforms_ = Transforms::by_name (o.transforms);
  } catch (const Error &e) {
    throw OpenError (Kind::Settings, e.what ());
  }
  const Transforms &t = p->transforms_;
  const int model_dims = p->policy_->spec ().action_dim;
  if (!t.none () && o.action_dims != 0 && o.action_dims != t.action_dims ())
    throw OpenError (Kind::Settings, "action-dims=" + std::to_string (o.action_dims) +
                                         ", but transforms '" + t.name () + "' make " +
                                         std::to_string (t.action_dims ()) +
                                         " (leave action-dims at 0).");
  // LeRobot's ACTION feature is what its postprocessor gives the robot: the default here too.
  const int want = !t.none ()                                                 ? t.action_dims ()
                   : o.action_dims                                            ? o.action_dims
                   : lerobot_action_dims && lerobot_action_dims <= model_dims ? lerobot_action_dims
                                                                              : 0;
  if (want < 0 || (model_dims > 0 && want > model_dims))
    throw OpenError (Kind::Settings, (t.none () ? "action-dims=" + std::to_string (want)
                                                : "transforms '" + t.name () + "' need " +
                                                      std::to_string (want) + " action dims") +
                                         ", but the model only makes " +
                                         std::to_string (model_dims) + ".");
  p->action_dims_ = want > 0 ? want : model_dims;
  p->prompt_length_ = o.prompt_length > 0 ? o.prompt_length : 48;
  try {
    p->stream_ = std::make_unique<OwnStream> (po.device);
  } catch (const std::exception &e) {
    throw OpenError (Kind::Library, e.what ());
  }
  return p;
}

OpenedPolicy::OpenedPolicy () = default;
OpenedPolicy::~OpenedPolicy () = default;

const PolicySpec &
OpenedPolicy::spec () const
{
  return policy_->spec ();
}

bool
OpenedPolicy::supports_guidance () const
{
  return policy_->supports_guidance ();
}

int
OpenedPolicy::prompt_length () const
{
  return policy_->spec ().max_tokens > 0 ? policy_->spec ().max_tokens : prompt_length_;
}

c10::Device
OpenedPolicy::device () const
{
  return policy_->device ();
}

std::string
OpenedPolicy::describe () const
{
  return policy_->describe () + ", tokenizer " + tokenizer_.path () +
         (norm_ ? std::string (", norm stats ") + norm_->source () + " (" +
                      (norm_->rule () == NormRule::LeRobot ? "LeRobot's formulas, state " : "") +
                      norm_mode_name (norm_mode_) +
                      (norm_->rule () == NormRule::LeRobot
                           ? std::string (", actions ") + norm_mode_name (action_norm_mode_)
                           : std::string ()) +
                      ")"
                : std::string (", no norm stats")) +
         (transforms_.none () ? std::string () : ", transforms " + transforms_.name ());
}

namespace
{

std::vector<double>
to_doubles (const at::Tensor &t)
{
  at::Tensor c = t.to (at::kCPU, at::kDouble).contiguous ();
  return std::vector<double> (c.data_ptr<double> (), c.data_ptr<double> () + c.numel ());
}

at::Tensor
from_doubles (const std::vector<double> &v, at::IntArrayRef shape)
{
  return at::tensor (v, at::kDouble).reshape (shape);
}

} // namespace

PolicyInput
OpenedPolicy::prepare (const Request &r, bool *truncated, at::Tensor *model_state)
{
  const PolicySpec &spec = policy_->spec ();
  PolicyInput in;
  if (!r.images.defined () || r.images.dim () != 4)
    throw Error ("policy input: images must be [V,3,H,W]");
  /* The images may still be being written on another stream: our stream waits for them on the
   * GPU before anything below reads them. */
  if (r.ready_event)
    stream_->wait_event (r.ready_event, r.images.device ());
  at::Tensor images = r.images.to (at::kFloat);
  const int64_t v = images.size (0);
  at::Tensor masks =
      r.image_masks.defined () ? r.image_masks.to (at::kCPU, at::kBool) : at::ones ({v}, at::kBool);
  if (spec.num_views > v) { // the model's other slots: masked, filled as openpi pads
    images = at::cat (
        {images, at::full ({spec.num_views - v, images.size (1), images.size (2), images.size (3)},
                           -1.0f, images.options ())});
    masks = at::cat ({masks, at::zeros ({spec.num_views - v}, at::kBool)});
  }
  in.images = images;
  in.image_masks = masks;

  if (!spec.state_in_prompt) {
    auto cached = token_cache_.find (r.prompt);
    if (cached == token_cache_.end ()) {
      if (token_cache_.size () >= kTokenCacheSize)
        token_cache_.clear ();
      cached = token_cache_
                   .emplace (r.prompt,
                             lerobot_newline_
                                 ? tokenizer_.encode_lerobot_pi0_prompt (r.prompt, prompt_length ())
                                 : tokenizer_.encode_prompt (r.prompt, prompt_length ()))
                   .first;
    }
    in.tokens = cached->second.ids;
    in.token_mask = cached->second.mask;
    *truncated = cached->second.truncated;
  }

  /* A made-up (zero) state would be a wrong prompt for pi0.5, not a neutral input: refused,
   * with or without transforms (whose missing state is zeros for pi0). */
  if (spec.state_in_prompt && !r.state.defined ())
    throw Error ("policy input: this " + spec.model_type +
                 " model reads the robot state through its prompt, and the observation has none");
  if (!transforms_.none ()) {
    /* openpi's order: the robot's transforms, then Normalize, in float64 as numpy does. */
    at::Tensor st = r.state.defined () ? r.state.to (at::kCPU, at::kDouble).reshape ({-1})
                                       : at::zeros ({transforms_.state_dims ()}, at::kDouble);
    *model_state = from_doubles (transforms_.state_in (to_doubles (st)), {st.numel ()});
    in.state =
        (norm_ ? norm_->normalize_state (*model_state, norm_mode_) : *model_state).to (at::kFloat);
  } else if (r.state.defined ()) {
    at::Tensor st = r.state.to (at::kFloat);
    in.state = norm_ ? norm_->normalize_state (st, norm_mode_).to (at::kFloat) : st;
  } else {
    in.state = at::zeros ({1});
  }
  if (spec.state_in_prompt) {
    /* pi0.5: the normalized, unpadded state as openpi's 256 bins in the prompt (a new prompt per
     * observation: no cache). */
    const Tokens t = tokenizer_.encode_pi05_prompt (
        r.prompt, Tokenizer::state_bins (to_doubles (in.state)), prompt_length ());
    in.tokens = t.ids;
    in.token_mask = t.mask;
    *truncated = t.truncated;
  }
  in.seed = r.seed;
  in.noise = r.noise;
  if (r.guidance.prefix.defined ()) {
    const at::Tensor &p = r.guidance.prefix;
    if (!policy_->supports_guidance ())
      throw Error ("real-time chunking is not supported by this policy: " + policy_->describe ());
    const bool exact = !transforms_.none ();
    if (p.dim () != 2 || p.size (0) < 1 || p.size (0) > spec.horizon || p.size (1) < 1 ||
        p.size (1) > action_dims_ || (exact && p.size (1) != action_dims_))
      throw Error ("RTC prefix must be float [R<=" + std::to_string (spec.horizon) +
                   (exact ? ", d=" : ", d<=") + std::to_string (action_dims_) + "]");
    at::Tensor y = p.to (at::kCPU, at::kFloat);
    if (!at::isfinite (y).all ().item<bool> ())
      throw Error ("RTC prefix has non-finite values");
    if (exact) /* robot units to the model's side: the output transforms' inverse */
      y = from_doubles (transforms_.actions_in (to_doubles (y), (int)y.size (0), (int)y.size (1),
                                                to_doubles (*model_state)),
                        {y.size (0), y.size (1)});
    if (norm_)
      y = norm_->normalize_actions (y, action_norm_mode_).to (at::kFloat);
    y = y.to (at::kFloat);
    if (y.size (1) < spec.action_dim)
      y = at::constant_pad_nd (y, {0, spec.action_dim - y.size (1)}, 0.0);
    in.guidance = r.guidance;
    in.guidance.prefix = y;
  }
  return in;
}

std::vector<Response>
OpenedPolicy::infer (const std::vector<Request> &batch)
{
  StreamScope on_stream (stream_.get ());
  std::vector<PolicyInput> inputs;
  std::vector<at::Tensor> model_states (batch.size ());
  std::vector<Response> out (batch.size ());
  inputs.reserve (batch.size ());
  for (size_t i = 0; i < batch.size (); i++)
    inputs.push_back (prepare (batch[i], &out[i].prompt_truncated, &model_states[i]));
  const auto t0 = std::chrono::steady_clock::now ();
  std::vector<at::Tensor> raw = policy_->infer_batch (inputs);
  const double model_ms =
      std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0).count ();
  for (size_t i = 0; i < batch.size (); i++) {
    out[i].model_ms = model_ms;
    if (!transforms_.none ()) {
      /* Unnormalize, then the robot's transforms, in float64 (openpi's numpy), float32 at the
       * end. */
      at::Tensor r = raw[i].to (at::kCPU, at::kDouble);
      at::Tensor a = norm_ ? norm_->unnormalize_actions (r, action_norm_mode_, action_dims_)
                           : r.narrow (1, 0, action_dims_);
      const int rows = (int)a.size (0), cols = (int)a.size (1);
      out[i].actions = from_doubles (transforms_.actions_out (to_doubles (a), rows, cols,
                                                              to_doubles (model_states[i])),
                                     {rows, action_dims_})
                           .to (at::kFloat)
                           .contiguous ();
      continue;
    }
    at::Tensor a = norm_ ? norm_->unnormalize_actions (raw[i], action_norm_mode_, action_dims_)
                         : raw[i].narrow (1, 0, action_dims_);
    out[i].actions = a.to (at::kFloat).contiguous ();
  }
  return out;
}

Response
OpenedPolicy::infer (const Request &request)
{
  return std::move (infer (std::vector<Request>{request}).front ());
}

bool
OpenedPolicy::warmup ()
{
  const PolicySpec &s = policy_->spec ();
  if (!s.num_views || !s.image_size || !s.state_dim)
    return false;
  Request r;
  r.images = at::zeros ({s.num_views, 3, s.image_size, s.image_size});
  r.image_masks = at::ones ({s.num_views}, at::kBool);
  /* A state the norm stats accept: at most their length (the robot's), at most the model's;
   * with transforms, the robot's they are written for. */
  const int64_t state_dim = !transforms_.none () ? transforms_.state_dims ()
                            : norm_ ? std::min<int64_t> (norm_->state ().dim (), s.state_dim)
                                    : s.state_dim;
  r.state = at::zeros ({state_dim});
  r.noise = at::zeros ({s.horizon, s.action_dim});
  infer (r);
  return true;
}

} // namespace pi0
