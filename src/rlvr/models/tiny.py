"""The built-in tiny model: a real transformers architecture, built locally.

A character-level tokenizer (plus the tag tokens as single tokens) and a
small Llama, saved in Hugging Face format so every later stage loads it
through the same `AutoModelForCausalLM` path as a real checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<|pad|>", "<|eos|>", "<|bos|>"]
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
CHARS = list("0123456789+-*/=()., ?:bxyzabcdefghijklmnopqrstuvwABCDEFGHIJKLMNOPQRSTUVWXYZ#'\"!\n")
CODE_CHARS = list("`%[]_<>")  # Python code (the code task); after the others, so arithmetic ids stay put
TOOL_TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # agent tasks: last, likewise


TINY_POSITIONS = 256
"""The tiny model's context by default (model.tiny_positions)."""


def build_tokenizer(code_chars: bool = False, tool_tags: bool = False) -> PreTrainedTokenizerFast:
    chars = list(dict.fromkeys(CHARS + (CODE_CHARS if code_chars else [])))  # keep order, drop repeats
    vocab = {tok: i for i, tok in enumerate(SPECIAL + TAGS + chars + ["<|unk|>"] + (TOOL_TAGS if tool_tags else []))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|unk|>"))
    # one token per character; the tags are added tokens and stay whole
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        eos_token="<|eos|>",
        bos_token="<|bos|>",
        unk_token="<|unk|>",
    )
    fast.add_tokens(TAGS + (TOOL_TAGS if tool_tags else []))
    return fast


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden: int,
    layers: int,
    heads: int,
    max_positions: int = TINY_POSITIONS,
    seed: int = 0,
) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def save_tiny(
    path: Path,
    hidden: int,
    layers: int,
    heads: int,
    seed: int = 0,
    code_chars: bool = False,
    tool_tags: bool = False,
    max_positions: int = TINY_POSITIONS,
) -> Path:
    tokenizer = build_tokenizer(code_chars, tool_tags)
    model = build_tiny_model(tokenizer, hidden, layers, heads, max_positions, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
