#include "model/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "io/error.h"

namespace pi0
{

namespace
{

/* A small JSON reader: config.json files are tiny and flat, and the project avoids pulling a
 * JSON library (or GLib) into inference/ for them. */
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json *get (const std::string &key) const
  {
    if (kind != Object)
      return nullptr;
    auto it = obj.find (key);
    return it == obj.end () ? nullptr : &it->second;
  }
};

class JsonParser
{
public:
  JsonParser (const std::string &text, const std::string &source) : s_ (text), source_ (source) {}

  Json parse ()
  {
    Json v = value ();
    ws ();
    if (pos_ != s_.size ())
      fail ("trailing characters");
    return v;
  }

private:
  [[noreturn]] void fail (const std::string &what) const
  {
    throw Error (source_ + ": invalid JSON at byte " + std::to_string (pos_) + ": " + what);
  }
  void ws ()
  {
    while (pos_ < s_.size () &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t'))
      pos_++;
  }
  bool eat (char c)
  {
    ws ();
    if (pos_ < s_.size () && s_[pos_] == c) {
      pos_++;
      return true;
    }
    return false;
  }
  void expect (char c)
  {
    if (!eat (c))
      fail (std::string ("expected '") + c + "'");
  }
  bool literal (const char *lit)
  {
    size_t n = std::char_traits<char>::length (lit);
    if (s_.compare (pos_, n, lit) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }
  std::string string_body ()
  {
    std::string out;
    while (pos_ < s_.size () && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size ())
          fail ("unterminated escape");
        char e = s_[pos_++];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'u': {
            if (pos_ + 4 > s_.size ())
              fail ("short \\u escape");
            // Config keys and values are ASCII; keep other code points as '?'.
            unsigned cp = std::strtoul (s_.substr (pos_, 4).c_str (), nullptr, 16);
            out += cp < 0x80 ? static_cast<char> (cp) : '?';
            pos_ += 4;
            break;
          }
          default:
            out += e;
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= s_.size ())
      fail ("unterminated string");
    pos_++;
    return out;
  }
  Json value ()
  {
    if (++depth_ > 64)
      fail ("nested too deeply");
    ws ();
    Json v;
    if (pos_ >= s_.size ())
      fail ("unexpected end");
    char c = s_[pos_];
    if (c == '{') {
      pos_++;
      v.kind = Json::Object;
      if (!eat ('}')) {
        do {
          ws ();
          if (pos_ >= s_.size () || s_[pos_] != '"')
            fail ("expected a key");
          pos_++;
          std::string key = string_body ();
          expect (':');
          v.obj[key] = value ();
        } while (eat (','));
        expect ('}');
      }
    } else if (c == '[') {
      pos_++;
      v.kind = Json::Array;
      if (!eat (']')) {
        do {
          v.arr.push_back (value ());
        } while (eat (','));
        expect (']');
      }
    } else if (c == '"') {
      pos_++;
      v.kind = Json::String;
      v.str = string_body ();
    } else if (literal ("true")) {
      v.kind = Json::Bool;
      v.b = true;
    } else if (literal ("false")) {
      v.kind = Json::Bool;
    } else if (literal ("null")) {
      v.kind = Json::Null;
    } else {
      const char *begin = s_.c_str () + pos_;
      char *end = nullptr;
      v.num = std::strtod (begin, &end);
      if (end == begin)
        fail ("unexpected character");
      v.kind = Json::Number;
      pos_ += static_cast<size_t> (end - begin);
    }
    depth_--;
    return v;
  }

  const std::string &s_;
  const std::string &source_;
  size_t pos_ = 0;
  int depth_ = 0;
};

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
  const Json *v = o.get (key);
  if (!v || v->kind == Json::Null)
    return fallback;
  if (v->kind != Json::Number || v->num != std::floor (v->num) || v->num < 0 || v->num > 1e9)
    throw Error (source + ": '" + key + "' must be a non-negative integer");
  return static_cast<int> (v->num);
}

double
num_field (const Json &o, const char *key, double fallback, const std::string &source)
{
  const Json *v = o.get (key);
  if (!v || v->kind == Json::Null)
    return fallback;
  if (v->kind != Json::Number)
    throw Error (source + ": '" + key + "' must be a number");
  return v->num;
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

int64_t
gemma_layer_params (const GemmaConfig &g)
{
  int64_t w = g.width, qd = int64_t (g.num_heads) * g.head_dim,
          kvd = int64_t (g.num_kv_heads) * g.head_dim;
  return w * qd + 2 * w * kvd + qd * w + 3 * w * g.mlp_dim + 2 * w;
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
  c.expert = expert.depth * gemma_layer_params (expert) + expert.width;
  const int64_t ew = expert.width;
  c.heads = (int64_t (action_dim) * ew + ew) + (ew * action_dim + action_dim) +
            (int64_t (state_dim) * ew + ew) + (2 * ew * ew + ew) + (ew * ew + ew);
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
  os << "vision (SigLIP): image " << vision.image_size << "x" << vision.image_size << ", patch "
     << vision.patch_size << " (" << vision.num_patches () << " tokens/view), width "
     << vision.width << ", depth " << vision.depth << ", mlp " << vision.mlp_dim << ", heads "
     << vision.num_heads << "\n";
  gemma ("prefix (Gemma)", text);
  gemma ("action expert (Gemma)", expert);
  os << "vocab: " << vocab_size << "\n";
  os << "views: " << num_views << ", tokens: " << max_tokens << ", prefix length: " << prefix_len ()
     << ", suffix length: " << suffix_len () << " (state + " << horizon << " actions)\n";
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
  os << "  \"type\": \"pi0\",\n";
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
  return {"pi0", "pi0-tiny"};
}

Pi0Config
config_by_name (const std::string &name)
{
  Pi0Config c;
  if (name == "pi0") {
    c.name = "pi0";
  } else if (name == "pi0-tiny") {
    // Every structural feature of pi0 (3 views, MQA, 2 experts, 48 tokens, 50x32 chunk) at a size
    // whose full 10-step inference takes milliseconds on one CPU core.
    c.name = "pi0-tiny";
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
  c.validate ();
  return c;
}

Pi0Config
config_from_json (const std::string &text, const std::string &source)
{
  Json root = JsonParser (text, source).parse ();
  if (root.kind != Json::Object)
    throw Error (source + ": config.json must hold a JSON object");
  if (const Json *t = root.get ("type"); t && t->kind == Json::String && t->str != "pi0")
    throw Error (source + ": model type '" + t->str + "' is not pi0");
  if (const Json *p = root.get ("pi05"); p && p->kind == Json::Bool && p->b)
    throw Error (
        source +
        ": pi05 checkpoints are not supported (different suffix: adaRMSNorm, no state token)");

  Pi0Config c = config_by_name ("pi0");
  c.name = source;
  if (const Json *g = root.get ("gst_pi0"); g && g->kind == Json::Object) {
    if (const Json *n = g->get ("name"); n && n->kind == Json::String)
      c.name = n->str;
    if (const Json *n = g->get ("tokenizer"); n && n->kind == Json::String)
      c.tokenizer = n->str;
    if (const Json *v = g->get ("vision"); v && v->kind == Json::Object) {
      c.vision.image_size = int_field (*v, "image_size", c.vision.image_size, source);
      c.vision.patch_size = int_field (*v, "patch_size", c.vision.patch_size, source);
      c.vision.width = int_field (*v, "width", c.vision.width, source);
      c.vision.depth = int_field (*v, "depth", c.vision.depth, source);
      c.vision.mlp_dim = int_field (*v, "mlp_dim", c.vision.mlp_dim, source);
      c.vision.num_heads = int_field (*v, "num_heads", c.vision.num_heads, source);
      c.vision.layer_norm_eps = num_field (*v, "layer_norm_eps", c.vision.layer_norm_eps, source);
    }
    if (const Json *t = g->get ("text"); t && t->kind == Json::Object)
      c.text = gemma_object (*t, source);
    if (const Json *e = g->get ("expert"); e && e->kind == Json::Object)
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
    c.validate ();
    return c;
  }

  // openpi-PyTorch and LeRobot name the Gemma variants.
  if (const Json *v = root.get ("paligemma_variant"); v && v->kind == Json::String)
    c.text = gemma_variant (v->str, source);
  if (const Json *v = root.get ("action_expert_variant"); v && v->kind == Json::String)
    c.expert = gemma_variant (v->str, source);
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
  if (const Json *r = root.get ("image_resolution");
      r && r->kind == Json::Array && !r->arr.empty ()) {
    if (r->arr.size () != 2 || r->arr[0].kind != Json::Number || r->arr[0].num != r->arr[1].num)
      throw Error (source + ": image_resolution must be square [N, N]");
    c.vision.image_size = static_cast<int> (r->arr[0].num);
  }
  // LeRobot lists its cameras; openpi always has three slots. Empty cameras add slots.
  if (const Json *f = root.get ("input_features"); f && f->kind == Json::Object) {
    int views = 0;
    for (const auto &kv : f->obj)
      if (const Json *t = kv.second.get ("type");
          t && t->kind == Json::String && t->str == "VISUAL")
        views++;
    views += int_field (root, "empty_cameras", 0, source);
    if (views > 0)
      c.num_views = views;
  }
  c.validate ();
  return c;
}

Pi0Config
config_from_json_file (const std::string &path)
{
  std::ifstream in (path, std::ios::binary);
  if (!in)
    throw Error ("cannot open model config '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf ();
  return config_from_json (ss.str (), path);
}

} // namespace pi0
