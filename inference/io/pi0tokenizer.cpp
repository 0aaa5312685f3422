// PaliGemma tokenizer through libsentencepiece, with openpi's Pi0 prompt format.
#include "inference/io/pi0tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <sys/stat.h>

#include <torch/types.h>

#include "inference/io/pi0error.h"

#ifdef PI0_HAVE_SENTENCEPIECE
#include <dlfcn.h>

#include <cstdlib>
#endif

namespace pi0
{
namespace
{

// Decodes one UTF-8 code point at s[i]; returns its length, or 0 when the bytes are not valid
// UTF-8 (overlong forms, surrogates and values above U+10FFFF included).
size_t
utf8_decode (const std::string &s, size_t i, uint32_t *cp)
{
  const auto b = [&] (size_t k) {
    return static_cast<unsigned char> (s[i + k]);
  };
  const size_t left = s.size () - i;
  const unsigned char c = b (0);
  size_t len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (left < len)
    return 0;
  for (size_t k = 1; k < len; k++) {
    if ((b (k) & 0xC0) != 0x80)
      return 0;
    v = (v << 6) | (b (k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
    return 0;
  *cp = v;
  return len;
}

// Python's str.isspace(): what str.strip() removes.
bool
py_isspace (uint32_t c)
{
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// SentencePiece opens whatever it is given: a directory makes it abort the whole process (issue
// 16) and a FIFO blocks it until something writes. Only a regular file goes past this point.
void
check_model_file (const std::string &path)
{
  struct stat st;
  if (::stat (path.c_str (), &st) != 0)
    throw Error (path + ": cannot load SentencePiece model: " + std::strerror (errno));
  if (S_ISDIR (st.st_mode))
    throw Error (path + ": cannot load SentencePiece model: it is a directory (name the .model "
                        "file in it)");
  if (!S_ISREG (st.st_mode))
    throw Error (path + ": cannot load SentencePiece model: not a regular file");
}

} // namespace

std::string
Tokenizer::clean_prompt (const std::string &prompt)
{
  // Code point boundaries, validating the whole string on the way.
  std::vector<std::pair<size_t, uint32_t>> cps;
  for (size_t i = 0; i < prompt.size ();) {
    uint32_t cp;
    size_t n = utf8_decode (prompt, i, &cp);
    if (n == 0)
      throw Error ("prompt is not valid UTF-8 (bad byte at offset " + std::to_string (i) + ")");
    cps.emplace_back (i, cp);
    i += n;
  }
  size_t first = 0, last = cps.size ();
  while (first < last && py_isspace (cps[first].second))
    first++;
  while (last > first && py_isspace (cps[last - 1].second))
    last--;
  const size_t begin = first < cps.size () ? cps[first].first : prompt.size ();
  const size_t end = last < cps.size () ? cps[last].first : prompt.size ();
  std::string out = prompt.substr (begin, end - begin);
  std::replace (out.begin (), out.end (), '_', ' ');
  std::replace (out.begin (), out.end (), '\n', ' ');
  return out;
}

#ifdef PI0_HAVE_SENTENCEPIECE

// libsentencepiece lives behind our shim (pi0spmshim.cpp), loaded with RTLD_LOCAL; the shim's own
// copy of it binds to itself first, never to LibTorch's same-named symbols (see the comment there).
namespace
{
struct SpmApi {
  void *(*load) (const char *, char **) = nullptr;
  void (*free_model) (void *) = nullptr;
  int (*encode) (void *, const char *, size_t, int **, size_t *, char **) = nullptr;
  int (*vocab_size) (void *) = nullptr;
  int (*bos_id) (void *) = nullptr;
  std::string error;
};

const SpmApi &
spm_api ()
{
  // Loaded once and never unloaded (a process-wide singleton, deliberately leaked).
  static const SpmApi *api = [] {
    auto *a = new SpmApi ();
    std::vector<std::string> candidates;
    if (const char *env = std::getenv ("PI0_SPM_SHIM"))
      candidates.push_back (env);
    candidates.push_back (PI0_SPM_SHIM_BUILD);
    candidates.push_back (PI0_SPM_SHIM_INSTALLED);
    void *h = nullptr;
    std::string tried;
    for (const auto &c : candidates) {
      h = dlopen (c.c_str (), RTLD_NOW | RTLD_LOCAL);
      if (h)
        break;
      const char *e = dlerror ();
      tried += "\n  " + c + ": " + (e ? e : "?");
    }
    if (!h) {
      a->error = "cannot load gst-pi0's SentencePiece module:" + tried;
      return a;
    }
    a->load = reinterpret_cast<decltype (a->load)> (dlsym (h, "pi0spm_load"));
    a->free_model = reinterpret_cast<decltype (a->free_model)> (dlsym (h, "pi0spm_free"));
    a->encode = reinterpret_cast<decltype (a->encode)> (dlsym (h, "pi0spm_encode"));
    a->vocab_size = reinterpret_cast<decltype (a->vocab_size)> (dlsym (h, "pi0spm_vocab_size"));
    a->bos_id = reinterpret_cast<decltype (a->bos_id)> (dlsym (h, "pi0spm_bos_id"));
    if (!a->load || !a->free_model || !a->encode || !a->vocab_size || !a->bos_id)
      a->error = "gst-pi0's SentencePiece module lacks its entry points";
    return a;
  }();
  return *api;
}

std::string
take_error (char *e)
{
  std::string s = e ? e : "unknown error";
  std::free (e);
  return s;
}
} // namespace

struct Tokenizer::Impl {
  void *model = nullptr;
  ~Impl ()
  {
    if (model)
      spm_api ().free_model (model);
  }
};

bool
Tokenizer::available ()
{
  return spm_api ().error.empty ();
}

Tokenizer
Tokenizer::load (const std::string &model_path)
{
  check_model_file (model_path);
  const SpmApi &api = spm_api ();
  if (!api.error.empty ())
    throw Error (model_path + ": " + api.error);
  auto impl = std::make_shared<Impl> ();
  char *err = nullptr;
  impl->model = api.load (model_path.c_str (), &err);
  if (!impl->model)
    throw Error (model_path + ": cannot load SentencePiece model: " + take_error (err));
  if (api.bos_id (impl->model) < 0)
    throw Error (model_path +
                 ": SentencePiece model has no BOS piece, which the Pi0 prompt format needs");
  Tokenizer t;
  t.impl_ = std::move (impl);
  t.path_ = model_path;
  return t;
}

std::vector<int64_t>
Tokenizer::encode (const std::string &text) const
{
  if (!impl_)
    throw Error ("tokenizer used before Tokenizer::load()");
  int *ids = nullptr;
  size_t n = 0;
  char *err = nullptr;
  if (spm_api ().encode (impl_->model, text.data (), text.size (), &ids, &n, &err) != 0)
    throw Error (path_ + ": SentencePiece encoding failed: " + take_error (err));
  std::vector<int64_t> out (ids, ids + n);
  std::free (ids);
  return out;
}

int
Tokenizer::vocab_size () const
{
  return impl_ ? spm_api ().vocab_size (impl_->model) : 0;
}
int
Tokenizer::bos_id () const
{
  return impl_ ? spm_api ().bos_id (impl_->model) : -1;
}

#else // !PI0_HAVE_SENTENCEPIECE

struct Tokenizer::Impl {
};

bool
Tokenizer::available ()
{
  return false;
}

Tokenizer
Tokenizer::load (const std::string &model_path)
{
  throw Error (model_path +
               ": cannot load the tokenizer: gst-pi0 was built without libsentencepiece "
               "(install libsentencepiece-dev and reconfigure)");
}

std::vector<int64_t>
Tokenizer::encode (const std::string &) const
{
  throw Error ("gst-pi0 was built without libsentencepiece");
}
int
Tokenizer::vocab_size () const
{
  return 0;
}
int
Tokenizer::bos_id () const
{
  return -1;
}

#endif

namespace
{

/* BOS + ids, cut to max_len or right-padded with 0, with the mask. */
Tokens
padded (std::vector<int64_t> ids, int max_len)
{
  Tokens out;
  out.truncated = ids.size () > static_cast<size_t> (max_len);
  out.n_real = static_cast<int> (std::min (ids.size (), static_cast<size_t> (max_len)));
  out.ids = torch::zeros ({max_len}, torch::kInt64);
  out.mask = torch::zeros ({max_len}, torch::kBool);
  auto id = out.ids.accessor<int64_t, 1> ();
  auto m = out.mask.accessor<bool, 1> ();
  for (int i = 0; i < out.n_real; i++) {
    id[i] = ids[i];
    m[i] = true;
  }
  return out;
}

} // namespace

Tokens
Tokenizer::encode_prompt (const std::string &prompt, int max_len) const
{
  if (max_len < 1)
    throw Error ("tokenizer max_len must be at least 1, got " + std::to_string (max_len));
  std::vector<int64_t> ids{bos_id ()};
  const auto text = encode (clean_prompt (prompt));
  const auto answer = encode ("\n");
  ids.insert (ids.end (), text.begin (), text.end ());
  ids.insert (ids.end (), answer.begin (), answer.end ());
  return padded (std::move (ids), max_len);
}

Tokens
Tokenizer::encode_lerobot_pi0_prompt (const std::string &prompt, int max_len) const
{
  if (max_len < 1)
    throw Error ("tokenizer max_len must be at least 1, got " + std::to_string (max_len));
  const bool has_newline = !prompt.empty () && prompt.back () == '\n';
  std::vector<int64_t> ids{bos_id ()};
  const auto text = encode (has_newline ? prompt : prompt + "\n");
  ids.insert (ids.end (), text.begin (), text.end ());
  return padded (std::move (ids), max_len);
}

std::vector<int>
Tokenizer::state_bins (const std::vector<double> &normalized)
{
  std::vector<int> bins;
  bins.reserve (normalized.size ());
  for (size_t i = 0; i < normalized.size (); i++) {
    const double x = normalized[i];
    if (!std::isfinite (x))
      throw Error ("state dim " + std::to_string (i) + " is " + std::to_string (x) +
                   " after normalization: it cannot be put into the prompt");
    // np.digitize(x, linspace(-1, 1, 257)[:-1]) - 1: the number of edges -1 + k/128 (k < 256,
    // exact in binary) at or below x, minus one. Below -1 gives -1, from 1 - 1/128 on 255.
    int below = 0;
    if (x >= -1.0)
      below = static_cast<int> (std::min (256.0, std::floor ((x + 1.0) * 128.0) + 1.0));
    // (x + 1) * 128 can round up onto an edge that x is below: step back where it did.
    while (below > 0 && -1.0 + (below - 1) / 128.0 > x)
      below--;
    bins.push_back (below - 1);
  }
  return bins;
}

std::string
Tokenizer::pi05_prompt (const std::string &prompt, const std::vector<int> &state_bins)
{
  std::string state;
  for (size_t i = 0; i < state_bins.size (); i++)
    state += (i ? " " : "") + std::to_string (state_bins[i]);
  return "Task: " + clean_prompt (prompt) + ", State: " + state + ";\nAction: ";
}

Tokens
Tokenizer::encode_pi05_prompt (const std::string &prompt, const std::vector<int> &state_bins,
                               int max_len) const
{
  if (max_len < 1)
    throw Error ("tokenizer max_len must be at least 1, got " + std::to_string (max_len));
  std::vector<int64_t> ids{bos_id ()};
  const auto text = encode (pi05_prompt (prompt, state_bins));
  ids.insert (ids.end (), text.begin (), text.end ());
  return padded (std::move (ids), max_len);
}

} // namespace pi0
