// PaliGemma tokenizer through libsentencepiece, with openpi's Pi0 prompt format.
#include "io/tokenizer.h"

#include <algorithm>

#include "io/error.h"

#ifdef PI0_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace pi0 {
namespace {

// Decodes one UTF-8 code point at s[i]; returns its length, or 0 when the bytes are not valid
// UTF-8 (overlong forms, surrogates and values above U+10FFFF included).
size_t utf8_decode(const std::string &s, size_t i, uint32_t *cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const size_t left = s.size() - i;
  const unsigned char c = b(0);
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
  if (left < len) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

// Python's str.isspace(): what str.strip() removes.
bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace

std::string Tokenizer::clean_prompt(const std::string &prompt) {
  // Code point boundaries, validating the whole string on the way.
  std::vector<std::pair<size_t, uint32_t>> cps;
  for (size_t i = 0; i < prompt.size();) {
    uint32_t cp;
    size_t n = utf8_decode(prompt, i, &cp);
    if (n == 0) throw Error("prompt is not valid UTF-8 (bad byte at offset " + std::to_string(i) + ")");
    cps.emplace_back(i, cp);
    i += n;
  }
  size_t first = 0, last = cps.size();
  while (first < last && py_isspace(cps[first].second)) first++;
  while (last > first && py_isspace(cps[last - 1].second)) last--;
  const size_t begin = first < cps.size() ? cps[first].first : prompt.size();
  const size_t end = last < cps.size() ? cps[last].first : prompt.size();
  std::string out = prompt.substr(begin, end - begin);
  std::replace(out.begin(), out.end(), '_', ' ');
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out;
}

#ifdef PI0_HAVE_SENTENCEPIECE

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

bool Tokenizer::available() { return true; }

Tokenizer Tokenizer::load(const std::string &model_path) {
  auto impl = std::make_shared<Impl>();
  const auto status = impl->sp.Load(model_path);
  if (!status.ok())
    throw Error(model_path + ": cannot load SentencePiece model: " + status.ToString());
  if (impl->sp.bos_id() < 0)
    throw Error(model_path + ": SentencePiece model has no BOS piece, which the Pi0 prompt format needs");
  Tokenizer t;
  t.impl_ = std::move(impl);
  t.path_ = model_path;
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string &text) const {
  if (!impl_) throw Error("tokenizer used before Tokenizer::load()");
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok()) throw Error(path_ + ": SentencePiece encoding failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

int Tokenizer::vocab_size() const { return impl_ ? impl_->sp.GetPieceSize() : 0; }
int Tokenizer::bos_id() const { return impl_ ? impl_->sp.bos_id() : -1; }

#else  // !PI0_HAVE_SENTENCEPIECE

struct Tokenizer::Impl {};

bool Tokenizer::available() { return false; }

Tokenizer Tokenizer::load(const std::string &model_path) {
  throw Error(model_path + ": cannot load the tokenizer: gst-pi0 was built without libsentencepiece "
                           "(install libsentencepiece-dev and reconfigure)");
}

std::vector<int64_t> Tokenizer::encode(const std::string &) const {
  throw Error("gst-pi0 was built without libsentencepiece");
}
int Tokenizer::vocab_size() const { return 0; }
int Tokenizer::bos_id() const { return -1; }

#endif

Tokens Tokenizer::encode_prompt(const std::string &prompt, int max_len) const {
  if (max_len < 1) throw Error("tokenizer max_len must be at least 1, got " + std::to_string(max_len));
  std::vector<int64_t> ids{bos_id()};
  const auto text = encode(clean_prompt(prompt));
  const auto answer = encode("\n");
  ids.insert(ids.end(), text.begin(), text.end());
  ids.insert(ids.end(), answer.begin(), answer.end());

  Tokens out;
  out.truncated = ids.size() > static_cast<size_t>(max_len);
  out.n_real = static_cast<int>(std::min(ids.size(), static_cast<size_t>(max_len)));
  out.ids = torch::zeros({max_len}, torch::kInt64);
  out.mask = torch::zeros({max_len}, torch::kBool);
  auto id = out.ids.accessor<int64_t, 1>();
  auto m = out.mask.accessor<bool, 1>();
  for (int i = 0; i < out.n_real; i++) {
    id[i] = ids[i];
    m[i] = true;
  }
  return out;
}

}  // namespace pi0
