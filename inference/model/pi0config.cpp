#include "inference/model/pi0config.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "inference/io/pi0error.h"
#include "common/pi0json.h"

namespace pi0
{

namespace
{

using Json = pi0::json::Value;

/* config.json through the project's strict reader (a key given twice is refused: a model
 * configuration must not be read one way by us and another way by its writer). */
Json
parse_config (const std::string &text, const std::string &source)
{
  std::string error;
  std::optional<Json> root = pi0::json::parse_strict (text, source, &error);
  if (!root)
    throw Error (error);
  return std::move (*root);
}

/* The member @key of @o, or nullptr when @o is not an object or lacks it. */
const Json *
member (const Json &o, const char *key)
{
  if (!o.is_object ())
    return nullptr;
  auto it = o.find (key);
  return it == o.end () ? nullptr : &*it;
}

GemmaConfig
gemma_variant (const std::string &variant, const std::string &source)
{
  GemmaConfig g;
  if (variant == "gemma_2b") {
    g = GemmaConfig{2048, 18, 16384, 8, 1, 256};
  } else if (variant == "gemma_300m") {
    g = GemmaConfig{1024, 18, 4096, 8, 1, 256};
  } else {
    throw Error (source + ": unknown Gemma variant '" + variant +
                 "' (supported: gemma_2b, gemma_300m)");
  }
  return g;
}

int
int_field (const Json &o, const char *key, int fallback, const std::string &source)
{
  const Json *v = member (o, key);
  if (!v || v->is_null ())
    return fallback;
  const double d = v->is_number () ? v->get<double> () : -1.0;
  if (!v->is_number () || d != std::floor (d) || d < 0 || d > 1e9)
    throw Error (source + ": '" + key + "' must be a whole number from 0 to 1000000000, found " +
                 v->dump ());
  return static_cast<int> (d);
}

double
num_field (const Json &o, const char *key, double fallback, const std::string &source)
{
  const Json *v = member (o, key);
  if (!v || v->is_null ())
    return fallback;
  if (!v->is_number () || !std::isfinite (v->get<double> ()))
    throw Error (source + ": '" + key + "' must be a finite number, found " + v->dump ());
  return v->get<double> ();
}

/* A string member, or nullptr when absent or of another type (optional informational keys). */
const std::string *
str_field (const Json &o, const char *key)
{
  const Json *v = member (o, key);
  return v && v->is_string () ? v->get_ptr<const std::string *> () : nullptr;
}

GemmaConfig
gemma_object (const Json &o, const std::string &source)
{
  GemmaConfig g;
  g.width = int_field (o, "width", g.width, source);
  g.depth = int_field (o, "depth", g.depth, source);
  g.mlp_dim = int_field (o, "mlp_dim", g.mlp_dim, source);
  g.num_heads = int_field (o, "num_heads", g.num_heads, source);
  g.num_kv_heads = int_field (o, "num_kv_heads", g.num_kv_heads, source);
  g.head_dim = int_field (o, "head_dim", g.head_dim, source);
  return g;
}

std::string
gemma_json (const GemmaConfig &g)
{
  std::ostringstream os;
  os << "{\"width\": " << g.width << ", \"depth\": " << g.depth << ", \"mlp_dim\": " << g.mlp_dim
     << ", \"num_heads\": " << g.num_heads << ", \"num_kv_heads\": " << g.num_kv_heads
     << ", \"head_dim\": " << g.head_dim << "}";
  return os.str ();
}

std::string
json_string (const std::string &v)
{
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char> (c) < 0x20) {
      char buf[8];
      std::snprintf (buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/* One RMSNorm: a scale vector, or (adaptive, pi05's action expert) a Dense from the condition
 * (width wide) to scale, shift and gate. */
int64_t
norm_params (int64_t w, bool adaptive)
{
  return adaptive ? w * 3 * w + 3 * w : w;
}

int64_t
gemma_layer_params (const GemmaConfig &g, bool adaptive = false)
{
  int64_t w = g.width, qd = int64_t (g.num_heads) * g.head_dim,
          kvd = int64_t (g.num_kv_heads) * g.head_dim;
  return w * qd + 2 * w * kvd + qd * w + 3 * w * g.mlp_dim + 2 * norm_params (w, adaptive);
}

} // namespace

void
Pi0Config::validate () const
{
  auto need = [&] (bool ok, const std::string &what) {
    if (!ok)
      throw Error ("config '" + name + "': " + what);
  };
  need (vision.patch_size > 0 && vision.image_size > 0 &&
            vision.image_size % vision.patch_size == 0,
        "vision image_size must be a positive multiple of patch_size");
  need (vision.width > 0 && vision.depth > 0 && vision.mlp_dim > 0, "vision dims must be positive");
  need (vision.num_heads > 0 && vision.width % vision.num_heads == 0,
        "vision width must be divisible by its num_heads");
  for (const GemmaConfig *g : {&text, &expert}) {
    need (g->width > 0 && g->depth > 0 && g->mlp_dim > 0 && g->head_dim > 0,
          "Gemma dims must be positive");
    need (g->num_kv_heads > 0 && g->num_heads % g->num_kv_heads == 0,
          "Gemma num_heads must be a multiple of num_kv_heads");
    need (g->head_dim % 2 == 0, "Gemma head_dim must be even (RoPE rotates halves)");
  }
  need (text.depth == expert.depth && text.num_heads == expert.num_heads &&
            text.num_kv_heads == expert.num_kv_heads && text.head_dim == expert.head_dim,
        "the two experts share attention: depth, num_heads, num_kv_heads and head_dim must match");
  need (expert.width % 2 == 0, "expert width must be even (sin-cos time embedding)");
  need (vocab_size > 0 && num_views > 0 && max_tokens > 0 && state_dim > 0 && action_dim > 0 &&
            horizon > 0 && num_steps > 0,
        "vocab_size, num_views, max_tokens, state_dim, action_dim, horizon, num_steps must be "
        "positive");
  need (min_period > 0 && max_period > min_period,
        "time embedding needs 0 < min_period < max_period");
  /* Bounds far above any published checkpoint (pi0: widths 2048, depth 18, vocab 257152),
   * checked before anything is sized from them: a config.json that says depth 1e9 is refused
   * here, not after a billion modules are built. Products in 64 bits. */
  auto at_most = [&] (int64_t v, int64_t cap, const char *what) {
    need (v <= cap,
          std::string (what) + " is " + std::to_string (v) + ", at most " + std::to_string (cap));
  };
  at_most (vision.image_size, 4096, "vision image_size");
  at_most (vision.width, 65536, "vision width");
  at_most (vision.depth, 1024, "vision depth");
  at_most (vision.mlp_dim, 1 << 18, "vision mlp_dim");
  at_most (vision.num_heads, 1024, "vision num_heads");
  for (const GemmaConfig *g : {&text, &expert}) {
    at_most (g->width, 65536, "Gemma width");
    at_most (g->depth, 1024, "Gemma depth");
    at_most (g->mlp_dim, 1 << 18, "Gemma mlp_dim");
    at_most (g->num_heads, 1024, "Gemma num_heads");
    at_most (g->head_dim, 4096, "Gemma head_dim");
  }
  at_most (vocab_size, 1 << 22, "vocab_size");
  at_most (num_views, 64, "num_views");
  at_most (max_tokens, 65536, "max_tokens");
  at_most (state_dim, 65536, "state_dim");
  at_most (action_dim, 65536, "action_dim");
  at_most (horizon, 65536, "horizon");
  at_most (num_steps, 100000, "num_steps");
  const int64_t side = vision.image_size / vision.patch_size;
  const int64_t prefix = int64_t (num_views) * side * side + max_tokens;
  at_most (prefix, 1 << 20, "the prefix length (views x patches + tokens)");
  const ParamCounts pc = param_counts ();
  need (pc.total () > 0 && pc.total () <= int64_t (1) << 38,
        "the architecture has " + std::to_string (pc.total ()) +
            " parameters, more than the 2^38 this loader accepts");
}

Pi0Config::ParamCounts
Pi0Config::param_counts () const
{
  ParamCounts c;
  const int64_t vw = vision.width, vm = vision.mlp_dim, p = vision.patch_size;
  int64_t vlayer = 4 * vw + 4 * (vw * vw + vw) + (vw * vm + vm) + (vm * vw + vw);
  c.vision = (vw * 3 * p * p + vw) + int64_t (vision.num_patches ()) * vw + vision.depth * vlayer +
             2 * vw + (vw * text.width + text.width);
  c.text = int64_t (vocab_size) * text.width + text.depth * gemma_layer_params (text) + text.width;
  c.expert = expert.depth * gemma_layer_params (expert, pi05) + norm_params (expert.width, pi05);
  const int64_t ew = expert.width;
  c.heads = (int64_t (action_dim) * ew + ew) + (ew * action_dim + action_dim);
  if (pi05) // time_mlp_in, time_mlp_out
    c.heads += 2 * (ew * ew + ew);
  else // state_proj, action_time_mlp_in, action_time_mlp_out
    c.heads += (int64_t (state_dim) * ew + ew) + (2 * ew * ew + ew) + (ew * ew + ew);
  return c;
}

std::string
Pi0Config::describe () const
{
  std::ostringstream os;
  auto gemma = [&] (const char *label, const GemmaConfig &g) {
    os << label << ": width " << g.width << ", depth " << g.depth << ", mlp " << g.mlp_dim
       << ", heads " << g.num_heads << ", kv heads " << g.num_kv_heads << ", head dim "
       << g.head_dim << "\n";
  };
  os << "config: " << name << "\n";
  os << "model type: " << type_name ()
     << (pi05 ? (discrete_state_input ? " (adaRMSNorm time conditioning, state as 256 bins in "
                                        "the prompt)"
                                      : " (adaRMSNorm time conditioning, no state input)")
              : " (state token and action time MLP in the suffix)")
     << "\n";
  os << "vision (SigLIP): image " << vision.image_size << "x" << vision.image_size << ", patch "
     << vision.patch_size << " (" << vision.num_patches () << " tokens/view), width "
     << vision.width << ", depth " << vision.depth << ", mlp " << vision.mlp_dim << ", heads "
     << vision.num_heads << "\n";
  gemma ("prefix (Gemma)", text);
  gemma ("action expert (Gemma)", expert);
  os << "vocab: " << vocab_size << "\n";
  os << "views: " << num_views << ", tokens: " << max_tokens << ", prefix length: " << prefix_len ()
     << ", suffix length: " << suffix_len () << (pi05 ? " (" : " (state + ") << horizon
     << " actions)\n";
  os << "state dim: " << state_dim << ", action dim: " << action_dim << ", horizon: " << horizon
     << ", denoising steps: " << num_steps << "\n";
  auto pc = param_counts ();
  os << "parameters by part: vision+projector " << pc.vision << ", prefix Gemma " << pc.text
     << ", action expert " << pc.expert << ", projections " << pc.heads << "\n";
  return os.str ();
}

std::string
Pi0Config::to_json () const
{
  std::ostringstream os;
  os.precision (17);
  os << "{\n";
  os << "  \"type\": \"" << type_name () << "\",\n";
  if (pi05) // openpi's spelling too, and its field for the state input
    os << "  \"pi05\": true,\n  \"discrete_state_input\": "
       << (discrete_state_input ? "true" : "false") << ",\n";
  os << "  \"action_dim\": " << action_dim << ",\n";
  os << "  \"action_horizon\": " << horizon << ",\n";
  // The openpi variant names only where the dims are exactly the published ones.
  bool published_text = text.width == 2048 && text.depth == 18 && text.mlp_dim == 16384;
  bool published_expert = expert.width == 1024 && expert.depth == 18 && expert.mlp_dim == 4096;
  os << "  \"paligemma_variant\": \"" << (published_text ? "gemma_2b" : "custom") << "\",\n";
  os << "  \"action_expert_variant\": \"" << (published_expert ? "gemma_300m" : "custom")
     << "\",\n";
  os << "  \"gst_pi0\": {\n";
  os << "    \"name\": " << json_string (name) << ",\n";
  os << "    \"tokenizer\": " << json_string (tokenizer) << ",\n";
  os << "    \"vision\": {\"image_size\": " << vision.image_size
     << ", \"patch_size\": " << vision.patch_size << ", \"width\": " << vision.width
     << ", \"depth\": " << vision.depth << ", \"mlp_dim\": " << vision.mlp_dim
     << ", \"num_heads\": " << vision.num_heads << ", \"layer_norm_eps\": " << vision.layer_norm_eps
     << "},\n";
  os << "    \"text\": " << gemma_json (text) << ",\n";
  os << "    \"expert\": " << gemma_json (expert) << ",\n";
  os << "    \"vocab_size\": " << vocab_size << ", \"num_views\": " << num_views
     << ", \"max_tokens\": " << max_tokens << ",\n";
  os << "    \"state_dim\": " << state_dim << ", \"action_dim\": " << action_dim
     << ", \"horizon\": " << horizon << ", \"num_steps\": " << num_steps << ",\n";
  os << "    \"rms_norm_eps\": " << rms_norm_eps << ", \"rope_theta\": " << rope_theta
     << ", \"min_period\": " << min_period << ", \"max_period\": " << max_period << "\n";
  os << "  }\n}\n";
  return os.str ();
}

std::vector<std::string>
config_names ()
{
  return {"pi0", "pi0-tiny", "pi05", "pi05-tiny"};
}

Pi0Config
config_by_name (const std::string &name)
{
  Pi0Config c;
  const bool pi05 = name == "pi05" || name == "pi05-tiny";
  if (name == "pi0" || name == "pi05") {
    c.name = name;
  } else if (name == "pi0-tiny" || name == "pi05-tiny") {
    // Every structural feature of pi0 (3 views, MQA, 2 experts, 48 tokens, 50x32 chunk) at a size
    // whose full 10-step inference takes milliseconds on one CPU core.
    c.name = name;
    c.vision = VisionConfig{32, 8, 32, 2, 64, 4, 1e-6};
    c.text = GemmaConfig{64, 2, 128, 4, 1, 16};
    c.expert = GemmaConfig{32, 2, 64, 4, 1, 16};
    c.vocab_size = 1024;
  } else {
    std::string known;
    for (const auto &n : config_names ())
      known += (known.empty () ? "" : ", ") + n;
    throw Error ("unknown model config '" + name + "' (known: " + known + ")");
  }
  if (pi05) {
    c.pi05 = true;
    c.max_tokens = 200; // openpi's Pi0Config(pi05=True).max_token_len
  }
  c.validate ();
  return c;
}

namespace
{

const char *
kind_name (ModelKind k)
{
  return k == ModelKind::Pi05 ? "pi05" : k == ModelKind::Pi0 ? "pi0" : "unknown";
}

/* What the weights of each kind hold that the other's do not: for the mismatch message. */
const char *
kind_keys (ModelKind k)
{
  return k == ModelKind::Pi05 ? "time_mlp_in/out and adaRMSNorm dense layers"
                              : "state_proj and action_time_mlp_in/out";
}

/* @o, or an empty object when it is null or not an object (for member lookups). */
const Json *
gst_or (const Json *o)
{
  static const Json empty = Json::object ();
  return o && o->is_object () ? o : &empty;
}

/* An optional boolean member; a member of another type is an error. */
std::optional<bool>
bool_field (const Json &o, const char *key, const std::string &source)
{
  const Json *v = member (o, key);
  if (!v || v->is_null ())
    return std::nullopt;
  if (!v->is_boolean ())
    throw Error (source + ": '" + key + "' must be true or false, found " + v->dump ());
  return v->get<bool> ();
}

/* The model type config.json declares: LeRobot's "type", openpi's "pi05", ours in "gst_pi0";
 * Unknown when it says nothing (openpi's converter). Contradictions are errors. */
ModelKind
declared_kind (const Json &root, const std::string &source)
{
  ModelKind kind = ModelKind::Unknown;
  auto declare = [&] (ModelKind k, const std::string &where) {
    if (kind != ModelKind::Unknown && kind != k)
      throw Error (source + ": " + where + " says " + kind_name (k) + ", but another key says " +
                   kind_name (kind));
    kind = k;
  };
  if (const std::string *t = str_field (root, "type")) {
    if (*t == "pi0")
      declare (ModelKind::Pi0, "\"type\"");
    else if (*t == "pi05")
      declare (ModelKind::Pi05, "\"type\"");
    else
      throw Error (source + ": model type '" + *t + "' is neither pi0 nor pi05");
  }
  if (std::optional<bool> p = bool_field (root, "pi05", source))
    declare (*p ? ModelKind::Pi05 : ModelKind::Pi0, "\"pi05\"");
  if (const Json *g = member (root, "gst_pi0"); g && g->is_object ())
    if (std::optional<bool> p = bool_field (*g, "pi05", source))
      declare (*p ? ModelKind::Pi05 : ModelKind::Pi0, "\"gst_pi0.pi05\"");
  return kind;
}

} // namespace

Pi0Config
config_from_json (const std::string &text, const std::string &source, ModelKind weights,
                  std::optional<bool> undeclared_discrete)
{
  const Json root = parse_config (text, source);
  if (!root.is_object ())
    throw Error (source + ": config.json must hold a JSON object");
  const ModelKind declared = declared_kind (root, source);
  if (declared != ModelKind::Unknown && weights != ModelKind::Unknown && declared != weights)
    throw Error (source + " says the model is " + kind_name (declared) + ", but the weights are " +
                 kind_name (weights) + "'s (they hold " + kind_keys (weights) + ", not " +
                 kind_keys (declared) + "): the config does not belong to these weights");
  const ModelKind kind = declared != ModelKind::Unknown ? declared : weights;

  Pi0Config c = config_by_name (kind == ModelKind::Pi05 ? "pi05" : "pi0");
  c.name = source;
  std::optional<bool> discrete = bool_field (root, "discrete_state_input", source);
  if (const Json *g = member (root, "gst_pi0"); g && g->is_object ())
    if (std::optional<bool> d = bool_field (*g, "discrete_state_input", source))
      discrete = d;
  if (!discrete && declared == ModelKind::Unknown && c.pi05)
    discrete = undeclared_discrete;
  if (discrete) {
    if (!c.pi05 && *discrete)
      throw Error (source + ": 'discrete_state_input' true is a pi05 setting; pi0 reads the state "
                            "as a continuous token");
    c.discrete_state_input = c.pi05 && *discrete;
  }
  // openpi-PyTorch and LeRobot name the Gemma variants.
  // A gst_pi0 object that gives the widths replaces them (ours writes "custom" there).
  const Json *gst = member (root, "gst_pi0");
  if (const std::string *v = str_field (root, "paligemma_variant");
      v && !member (*gst_or (gst), "text"))
    c.text = gemma_variant (*v, source);
  if (const std::string *v = str_field (root, "action_expert_variant");
      v && !member (*gst_or (gst), "expert"))
    c.expert = gemma_variant (*v, source);
  c.action_dim = int_field (root, "action_dim", c.action_dim, source);     // openpi
  c.action_dim = int_field (root, "max_action_dim", c.action_dim, source); // LeRobot
  c.state_dim = c.action_dim; // openpi pads both to action_dim
  c.state_dim = int_field (root, "max_state_dim", c.state_dim, source);
  c.horizon = int_field (root, "action_horizon", c.horizon, source);
  c.horizon = int_field (root, "chunk_size", c.horizon, source);
  c.max_tokens = int_field (root, "max_token_len", c.max_tokens, source);
  c.max_tokens = int_field (root, "tokenizer_max_length", c.max_tokens, source);
  c.num_steps = int_field (root, "num_inference_steps", c.num_steps, source);
  c.min_period = num_field (root, "min_period", c.min_period, source);
  c.max_period = num_field (root, "max_period", c.max_period, source);
  if (const Json *r = member (root, "image_resolution"); r && r->is_array () && !r->empty ()) {
    const auto side = [&] (size_t i) {
      const Json &v = (*r)[i];
      const double d = v.is_number () ? v.get<double> () : 0.0;
      return d == std::floor (d) && d > 0 && d <= 1e6 ? static_cast<int> (d) : 0;
    };
    if (r->size () != 2 || side (0) == 0 || side (0) != side (1))
      throw Error (source + ": image_resolution must be square [N, N], found " + r->dump ());
    c.vision.image_size = side (0);
  }
  // LeRobot lists its cameras; openpi always has three slots. LeRobot's
  // PI0Config.validate_features() adds "observation.images.empty_camera_<i>" (i <
  // empty_cameras) to input_features, and save_pretrained() writes the features with them: an
  // empty camera already listed is one slot, not two (PI0Policy pads to len(image_features)).
  if (const Json *f = member (root, "input_features"); f && f->is_object ()) {
    int views = 0;
    for (const auto &kv : f->items ())
      if (const std::string *t = str_field (kv.value (), "type"); t && *t == "VISUAL")
        views++;
    const int empty = int_field (root, "empty_cameras", 0, source);
    if (empty > 64)
      throw Error (source + ": 'empty_cameras' is " + std::to_string (empty) + ", at most 64");
    for (int i = 0; i < empty; i++) {
      const Json *listed =
          member (*f, ("observation.images.empty_camera_" + std::to_string (i)).c_str ());
      const std::string *t = listed ? str_field (*listed, "type") : nullptr;
      if (!(t && *t == "VISUAL"))
        views++;
    }
    if (views > 0)
      c.num_views = views;
  }
  // Ours: the "gst_pi0" object holds every dimension (sizes LeRobot's and openpi's configs
  // cannot name); what it gives replaces what the keys above said.
  if (const Json *g = member (root, "gst_pi0"); g && g->is_object ()) {
    if (const std::string *n = str_field (*g, "name"))
      c.name = *n;
    if (const std::string *n = str_field (*g, "tokenizer"))
      c.tokenizer = *n;
    if (const Json *v = member (*g, "vision"); v && v->is_object ()) {
      c.vision.image_size = int_field (*v, "image_size", c.vision.image_size, source);
      c.vision.patch_size = int_field (*v, "patch_size", c.vision.patch_size, source);
      c.vision.width = int_field (*v, "width", c.vision.width, source);
      c.vision.depth = int_field (*v, "depth", c.vision.depth, source);
      c.vision.mlp_dim = int_field (*v, "mlp_dim", c.vision.mlp_dim, source);
      c.vision.num_heads = int_field (*v, "num_heads", c.vision.num_heads, source);
      c.vision.layer_norm_eps = num_field (*v, "layer_norm_eps", c.vision.layer_norm_eps, source);
    }
    if (const Json *t = member (*g, "text"); t && t->is_object ())
      c.text = gemma_object (*t, source);
    if (const Json *e = member (*g, "expert"); e && e->is_object ())
      c.expert = gemma_object (*e, source);
    c.vocab_size = int_field (*g, "vocab_size", c.vocab_size, source);
    c.num_views = int_field (*g, "num_views", c.num_views, source);
    c.max_tokens = int_field (*g, "max_tokens", c.max_tokens, source);
    c.state_dim = int_field (*g, "state_dim", c.state_dim, source);
    c.action_dim = int_field (*g, "action_dim", c.action_dim, source);
    c.horizon = int_field (*g, "horizon", c.horizon, source);
    c.num_steps = int_field (*g, "num_steps", c.num_steps, source);
    c.rms_norm_eps = num_field (*g, "rms_norm_eps", c.rms_norm_eps, source);
    c.rope_theta = num_field (*g, "rope_theta", c.rope_theta, source);
    c.min_period = num_field (*g, "min_period", c.min_period, source);
    c.max_period = num_field (*g, "max_period", c.max_period, source);
  }

  c.validate ();
  return c;
}

Pi0Config
config_from_json_file (const std::string &path, ModelKind weights,
                       std::optional<bool> undeclared_discrete)
{
  /* LeRobot's config.json is a few kB; 4 MiB is room for any. */
  std::string text, err;
  if (!read_regular_file (path, size_t (4) << 20, &text, &err))
    throw Error ("cannot read model config " + err);
  return config_from_json (text, path, weights, undeclared_discrete);
}

} // namespace pi0
