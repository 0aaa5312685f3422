#!/usr/bin/env bash
# Trains tiny_paligemma.model, the SentencePiece model the tests use in place of PaliGemma's
# 257152-piece paligemma_tokenizer.model (which the tests cannot download). It mimics what
# matters for the Pi0 prompt format: BPE; identity normalization with no dummy prefix and no
# whitespace folding (as Gemma's tokenizer); byte fallback and split digits; the special ids
# of PaliGemma (pad 0, eos 1, bos 2, unk 3); "\n" as a piece of its own (Gemma has "\n" = 108).
# Needs Debian's `sentencepiece` package (spm_train). Deterministic: one thread, no sampling.
set -euo pipefail
cd "$(dirname "$0")"
spm_train \
  --input=corpus.txt \
  --model_prefix=tiny_paligemma \
  --model_type=bpe \
  --vocab_size=400 \
  --hard_vocab_limit=false \
  --character_coverage=1.0 \
  --normalization_rule_name=identity \
  --add_dummy_prefix=false \
  --remove_extra_whitespaces=false \
  --byte_fallback=true \
  --split_digits=true \
  --pad_id=0 --eos_id=1 --bos_id=2 --unk_id=3 \
  --user_defined_symbols=$'\n' \
  --num_threads=1 \
  --input_sentence_size=0 \
  --shuffle_input_sentence=false \
  --minloglevel=1
rm -f tiny_paligemma.vocab
echo "wrote $(pwd)/tiny_paligemma.model"
