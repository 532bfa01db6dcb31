"""Loading real-format models: local directories in fp32/bf16, Llama and Qwen2, hub ids from the
cache (offline), GGUF files (dequantized once), pad fallback, gradient checkpointing, chat prompts."""

import importlib.util
import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.config import load_config
from rlvr.scoring import completion_logprobs
from rlvr.models import ensure_trainable, load_model, load_policy, resolve_model
from rlvr.configlib import ConfigError
from rlvr.models.gguf import ModelNotFound
from rlvr.models.gguf import dequantize_gguf
from rlvr.models.tiny import build_tokenizer
from rlvr.records import Problem
from helpers import sample

from rlvr.rollout import SamplingParams, render_prompt

CHAT = (
    "{% for m in messages %}<|bos|>{{ m['role'] }}: {{ m['content'] }}<|eos|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|bos|>assistant: {% endif %}"
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run ~30x faster on one thread than on a contended pool of two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_tokenizer(chat=True, pad=True):
    tok = build_tokenizer()
    if chat:
        tok.chat_template = CHAT
    if not pad:
        tok.pad_token = None
    return tok


def save_tiny(path, arch="llama", chat=True, pad=True, seed=0):
    tok = tiny_tokenizer(chat, pad)
    common = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**common)) if arch == "llama" else Qwen2ForCausalLM(Qwen2Config(**common))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model.eval(), tok


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_local_directory_loads_in_each_dtype(tmp_path, arch, dtype):
    original, _ = save_tiny(tmp_path, arch)
    model, tok = load_model(tmp_path, dtype)
    assert model.dtype == {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    assert type(model).__name__ == type(original).__name__
    x = torch.tensor([[3, 4, 5, 6]])
    tol = 1e-5 if dtype == "float32" else 5e-2
    assert torch.allclose(model(x).logits.float(), original(x).logits, atol=tol)


def test_pad_token_falls_back_to_eos_and_padding_is_masked(tmp_path):
    save_tiny(tmp_path, pad=False)
    model, tok = load_model(tmp_path)
    assert tok.pad_token_id == tok.eos_token_id
    # pad == eos: left-padded sampling must still agree with right-padded re-scoring
    problems = [Problem(id="a", prompt="1+2="), Problem(id="b", prompt="345+67+8=")]
    torch.manual_seed(0)
    out = sample(model, tok, problems, SamplingParams(group_size=2, max_new_tokens=6))
    again = completion_logprobs(model, out, tok.pad_token_id, temperature=1.0)
    for i, c in enumerate(out):
        assert torch.allclose(again[i, : len(c.token_ids)], torch.tensor(c.logprobs), atol=1e-4)


def test_hub_id_loads_from_the_local_cache_without_network(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    snapshot = tmp_path / "hub" / "models--someorg--tiny" / "snapshots" / ("a" * 40)
    save_tiny(snapshot)
    (tmp_path / "hub" / "models--someorg--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someorg--tiny" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = load_model("someorg/tiny")
    assert model.config.hidden_size == 32 and tok.chat_template == CHAT


def test_a_hub_id_fails_at_once_when_the_hub_cannot_be_reached(monkeypatch):
    """One request without retries (not the hub client's ~30-60 s of backoff), then the clear error;
    in offline mode none at all. The 'hub' is a listener this test opened on 127.0.0.1 that drops
    every connection before answering, as a broken network would."""
    import socket
    import threading

    import huggingface_hub.constants as hub

    from rlvr.models import loading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    hits = []

    def drop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            hits.append(1)
            conn.close()

    threading.Thread(target=drop, daemon=True).start()
    monkeypatch.setattr(hub, "ENDPOINT", f"http://127.0.0.1:{srv.getsockname()[1]}")
    monkeypatch.setattr(loading, "_HUB", None)
    try:
        with pytest.raises(ModelNotFound, match=r"someorg/nothing.*hub cannot be reached \(http://127.0.0.1"):
            load_model("someorg/nothing")
        assert len(hits) == 1  # one probe, no retries
        monkeypatch.setattr(loading, "_HUB", None)
        monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
        with pytest.raises(ModelNotFound, match="HF_HUB_OFFLINE is set"):
            load_model("someorg/nothing")
        assert len(hits) == 1
    finally:
        srv.close()


def test_gradient_checkpointing_gives_the_same_gradients(tmp_path):
    save_tiny(tmp_path)
    grads = []
    for ckpt in (False, True):
        model, _ = load_model(tmp_path, gradient_checkpointing=ckpt)
        model.train()
        assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules()) == ckpt
        x = torch.tensor([[3, 4, 5, 6, 7, 8]])
        model(x, labels=x).loss.backward()
        grads.append(model.model.layers[0].mlp.up_proj.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_chat_prompt_renders_the_template_with_a_generation_prompt(tmp_path):
    save_tiny(tmp_path)
    _, tok = load_model(tmp_path)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+2="}]
    ids = render_prompt(tok, Problem(id="x", prompt=messages))
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert tok.decode(ids) == "<|bos|>system: be brief<|eos|>\n<|bos|>user: 1+2=<|eos|>\n<|bos|>assistant: "
    assert render_prompt(tok, Problem(id="y", prompt="1+2=")) == tok("1+2=", add_special_tokens=False).input_ids


# --- GGUF ---------------------------------------------------------------------------------------


def _llama_cpp_permute(w, n_head):
    # llama.cpp stores q/k rows interleaved for its rope; transformers undoes this on load
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path):
    """A small Llama written as llama.cpp would (F32 tensors, byte-level BPE vocab, chat template)."""
    gguf = pytest.importorskip("gguf")
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    spelling = bytes_to_unicode()
    tokens = [spelling[b] for b in range(256)] + ["ab", "<|bos|>", "<|im_end|>"]
    config = LlamaConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        bos_token_id=257,
        eos_token_id=258,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2), w.add_context_length(128), w.add_embedding_length(32), w.add_feed_forward_length(64)
    w.add_head_count(4), w.add_head_count_kv(2), w.add_rope_freq_base(10000.0), w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8), w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("default"), w.add_token_list(tokens)
    w.add_token_types([1] * 257 + [3] * 2), w.add_token_merges(["a b"])
    w.add_bos_token_id(257), w.add_eos_token_id(258)
    w.add_chat_template(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    parts = [
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
        ("input_layernorm", "attn_norm"),
        ("post_attention_layernorm", "ffn_norm"),
    ]
    for i in range(2):
        names.update({f"model.layers.{i}.{hf}.weight": f"blk.{i}.{gg}.weight" for hf, gg in parts})
    for key, value in model.state_dict().items():
        if key in names:
            a = value.numpy()
            a = _llama_cpp_permute(a, 4) if "q_proj" in key else _llama_cpp_permute(a, 2) if "k_proj" in key else a
            w.add_tensor(names[key], np.ascontiguousarray(a))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return model


def test_gguf_is_dequantized_once_to_a_trainable_safetensors_model(tmp_path):
    original = write_tiny_gguf(tmp_path / "tiny.gguf")
    # straight from the GGUF, transformers marks the model quantized: rlvr refuses to train it
    raw = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="tiny.gguf")
    with pytest.raises(ValueError, match="quantized"):
        ensure_trainable(raw)
    cfg = load_config(None, [f"model.name={tmp_path / 'tiny.gguf'}", f"model.cache_dir={tmp_path / 'cache'}"])
    path = resolve_model(cfg.model)
    assert (tmp_path / "cache").exists() and str(path).startswith(str(tmp_path / "cache"))
    files = {p.name for p in (tmp_path / "cache").glob("*/*")}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= files
    assert "quantization_config" not in json.loads((next((tmp_path / "cache").glob("*/config.json"))).read_text())
    model, tok = load_policy(cfg.model, path)
    ensure_trainable(model)
    x = torch.tensor([[257, 70, 71, 72, 5]])
    assert torch.allclose(model(x).logits, original(x).logits, atol=1e-5)
    assert tok.pad_token_id == tok.eos_token_id == 258 and tok.chat_template
    # converted once: the second call returns the cached directory without loading the GGUF
    mtime = (path_obj := next((tmp_path / "cache").glob("*/model.safetensors"))).stat().st_mtime_ns
    assert dequantize_gguf(tmp_path / "tiny.gguf", cache_dir=tmp_path / "cache") == path_obj.parent
    assert path_obj.stat().st_mtime_ns == mtime
    # the directory + gguf_file form resolves to the same converted model
    cfg2 = load_config(
        None, [f"model.name={tmp_path}", "model.gguf_file=tiny.gguf", f"model.cache_dir={tmp_path / 'cache'}"]
    )
    assert resolve_model(cfg2.model) == path


def test_packaged_model_missing_says_how_to_install(monkeypatch):
    import importlib.util

    from rlvr.models.gguf import packaged_gguf

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFound, match="make smollm2"):
        packaged_gguf("smollm2")


def test_a_gguf_without_the_gguf_package_is_a_one_line_config_error(tmp_path, monkeypatch):
    write_tiny_gguf(tmp_path / "tiny.gguf")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(
        ConfigError, match=r"model.name: reading tiny.gguf \(a GGUF\) needs gguf: pip install 'rlvr\[gguf\]'"
    ):
        dequantize_gguf(tmp_path / "tiny.gguf", cache_dir=tmp_path / "cache")


def test_every_weight_load_checks_its_keys(tmp_path):
    # a tied lm_head is saved once and may be missing; anything else missing or unexpected is an error
    from safetensors.torch import load_file, save_file

    from rlvr.checkpoint import load_weights

    model, _ = save_tiny(tmp_path / "m")
    load_weights(model, tmp_path / "m")  # the tied lm_head.weight is not in the file: fine
    state = load_file(tmp_path / "m" / "model.safetensors")
    for broken in (
        {k: v for k, v in state.items() if "layers.1.mlp" not in k},
        {**state, "extra.weight": torch.zeros(1)},
    ):
        save_file(broken, tmp_path / "m" / "model.safetensors")
        with pytest.raises(RuntimeError, match="weights do not fit the model"):
            load_weights(model, tmp_path / "m")
