// The PaliGemma SentencePiece tokenizer with openpi's Pi0 and pi0.5 prompt formats.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace pi0
{

struct Tokens {
  at::Tensor ids;  // int64 [max_len]: BOS, the cleaned prompt, "\n", then 0 (openpi pads with 0)
  at::Tensor mask; // bool [max_len]: true on the n_real real tokens
  int n_real = 0;
  bool truncated = false; // the prompt needed more than max_len tokens and was cut
};

class Tokenizer
{
public:
  // Loads a SentencePiece model file (for Pi0: PaliGemma's paligemma_tokenizer.model, vocab
  // 257152). Throws pi0::Error when the file cannot be read, is a directory or not a regular
  // file, is not a SentencePiece model, or has no BOS piece, and when gst-pi0 was built without
  // libsentencepiece.
  static Tokenizer load (const std::string &model_path);

  // True when this build has libsentencepiece (otherwise load() always throws).
  static bool available ();

  // openpi's PaligemmaTokenizer (Pi0 format): the prompt is cleaned like Python's
  // `prompt.strip().replace("_", " ").replace("\n", " ")` (strip() removes Unicode whitespace
  // at both ends), tokenized with BOS, followed by the tokens of "\n" (the start-of-answer
  // token), cut to max_len or right-padded with 0. Throws pi0::Error on invalid UTF-8 or
  // max_len < 1.
  Tokens encode_prompt (const std::string &prompt, int max_len = 48) const;

  // openpi's PaligemmaTokenizer with a state (pi0.5): BOS + the tokens of
  // pi05_prompt(prompt, state_bins), cut to max_len or right-padded with 0 (no separate "\n").
  Tokens encode_pi05_prompt (const std::string &prompt, const std::vector<int> &state_bins,
                             int max_len = 200) const;
  // LeRobot's pi0 (Pi0NewLineProcessor + its tokenizer step): BOS + the tokens of the prompt as
  // given, with "\n" appended unless it ends with one, as one text (no cleaning, unlike
  // openpi's format, which tokenizes the cleaned prompt and "\n" apart).
  Tokens encode_lerobot_pi0_prompt (const std::string &prompt, int max_len = 48) const;
  // "Task: {clean_prompt(prompt)}, State: {bins joined by spaces};\nAction: ".
  static std::string pi05_prompt (const std::string &prompt, const std::vector<int> &state_bins);
  // openpi's 256 state bins, np.digitize(x, np.linspace(-1, 1, 257)[:-1]) - 1, of a normalized
  // state: no clipping, so a value below -1 gives -1 and one from 1 - 1/128 on gives 255.
  // Throws pi0::Error on NaN or infinity (numpy would bin NaN as 255).
  static std::vector<int> state_bins (const std::vector<double> &normalized);

  // Plain SentencePiece encoding, no BOS, no cleaning.
  std::vector<int64_t> encode (const std::string &text) const;

  int vocab_size () const;
  int bos_id () const;
  const std::string &path () const { return path_; }

  // The cleaning step alone (exposed for tests and for logging what the model sees).
  static std::string clean_prompt (const std::string &prompt);

private:
  struct Impl;
  std::shared_ptr<const Impl> impl_; // shared: a Tokenizer is cheap to copy and thread-safe to use
  std::string path_;
};

} // namespace pi0
