"""A tiny random Qwen3 (vocab ~1 K, hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 32, tied
embeddings) with a byte-level BPE tokenizer whose special tokens include the think/action
tags, and a chat template: built here by transformers and tokenizers, nothing downloaded. The
engines' CPU paths load it (vLLM's CPU attention needs head_dim 32 or more)."""

from __future__ import annotations

import os

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<action>", "</action>"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)

CORPUS = [
    "You are in a web shop. Search for a red cotton shirt under 30 dollars, then click buy.",
    "The room has a table, a sink and a fridge. Put a clean mug in the coffee machine.",
    "Question: who wrote the novel about the white whale? Search the web, then answer.",
    "think step by step about the goal, the observation and the admissible actions.",
    "search[red shirt] click[item 3] click[buy now] go to table 1 take mug 2 from table 1",
    "answer: Herman Melville. The first sentence of the novel is: Call me Ishmael.",
] * 20
# Pseudo-words so that BPE merges fill a ~1 K vocabulary (deterministic).
_state = 12345
for _ in range(3000):
    _word = ""
    for _ in range(3 + _state % 6):
        _state = (_state * 1103515245 + 12345) % 2**31
        _word += "abcdefghijklmnopqrstuvwxyz"[(_state >> 16) % 26]
    CORPUS.append(_word)


def build(path: str, seed: int = 0) -> dict:
    """Writes the model and tokenizer to `path`; returns the special token ids."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    os.makedirs(path, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    ids["\n"] = fast.convert_tokens_to_ids("Ċ")  # byte-level newline
    vocab = tok.get_vocab_size()
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=None,
        dtype="float32",
    )
    model = Qwen3ForCausalLM(cfg)
    # A random model with the default 0.02 init gives near-uniform rows; a larger output scale
    # makes rows whose entropy and confidence move from step to step, like a trained model's.
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.08)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(path)
    return ids
