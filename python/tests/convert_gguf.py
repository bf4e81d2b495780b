"""Runs llama.cpp's convert_hf_to_gguf.py (from the source tree in argv[1]) on a Hugging Face
model folder, reporting the GPT-2 pre-tokenizer for the tiny model's byte-level BPE tokenizer
(the script identifies pre-tokenizers by a hash of known tokenizers and refuses unknown ones),
and going straight to its BPE vocabulary path.

usage: python convert_gguf.py LLAMA_DIR MODEL_DIR OUT.gguf"""

import os
import sys

llama_dir, model_dir, out = sys.argv[1:4]
sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))
sys.path.insert(0, llama_dir)
import convert_hf_to_gguf as conv  # noqa: E402

from conversion import base  # noqa: E402


def _no_sentencepiece(self):
    # Qwen's set_vocab tries SentencePiece first and falls back to BPE on FileNotFoundError,
    # but imports sentencepiece before looking for the file: the tiny model has tokenizer.json.
    raise FileNotFoundError("no tokenizer.model")


base.TextModel._set_vocab_sentencepiece = _no_sentencepiece
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", "f32"]
conv.main()
