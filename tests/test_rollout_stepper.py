"""The loop engine's lean Llama-family forward (rlvr.rollout.stepper.LlamaStepper) gives the
logits of the model's own forward, through prefill (with and without a prefix the prompts share),
group repeat, row drops (finished rows left in the cache, then compacted) and decode steps."""

import pytest
import torch

from rlvr.rollout.stepper import HFStepper, LlamaStepper, make_stepper


def _model(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    shape = dict(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    if kind == "qwen2":  # q, k, v carry biases (initialised to zero: made nonzero here so they count)
        model = Qwen2ForCausalLM(Qwen2Config(**shape, tie_word_embeddings=True)).eval()
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(std=0.5)
        return model
    return LlamaForCausalLM(LlamaConfig(**shape, rope_theta=500.0)).eval()


PROMPTS = {
    "distinct": [[5, 9, 13, 20, 7], [11, 12], [3, 4, 5, 6, 7, 8, 9, 10]],
    "shared prefix": [[5, 9, 13, 20, 7], [5, 9, 13, 2], [5, 9, 13, 4, 5, 6, 7, 8, 9, 10]],
    "one a prefix of another": [[5, 9, 13], [5, 9, 13, 20, 7, 8], [5, 9, 13, 20]],
}


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("prompts", list(PROMPTS))
@pytest.mark.parametrize("gemm", ["skinny", "mkl-packed", "plain"])
@pytest.mark.parametrize("attention", ["native", "torch"])
def test_lean_forward_equals_the_models_own(kind, prompts, gemm, attention, monkeypatch):
    import rlvr.rollout.stepper as stepper_module
    from rlvr.rollout import native

    # every product path, used at every row count (prefill, 6, 5, 3 rows): rlvr's GEMM for few rows (a
    # decode of at most native.SKINNY_ROWS rows), the weights packed once for MKL, and F.linear on the
    # plain weights; each with rlvr's decode attention and with torch's (two parts merged by their LSEs)
    if gemm == "mkl-packed" and not stepper_module._mkl_packs():
        pytest.skip("this torch build has no MKL packed GEMM")
    if (gemm == "skinny" or attention == "native") and native.library() is None:
        pytest.skip("rlvr's native kernels cannot be built here (no C compiler or no AVX2+FMA)")
    monkeypatch.setattr(stepper_module, "_mkl_packs", lambda: gemm == "mkl-packed")
    if attention == "torch":  # and with MKL or F.linear, torch's RMSNorm and gated unit too
        monkeypatch.setattr(native, "attention_supported", lambda *shape: False)
        if gemm != "skinny":
            monkeypatch.setattr(native, "library", lambda: None)
    model = _model(kind)
    assert LlamaStepper.supports(model)
    # rows finishing: 1 of 6 (5 left: stays in the cache), then 2 more (3 of 6: the cache is compacted)
    drops = {1: [0, 1, 2, 3, 5], 3: [0, 2, 3]}
    logits, caches = [], []
    with torch.no_grad():
        lean = LlamaStepper(model, max_new_tokens=6, rows=6 if gemm == "skinny" else None)
        assert [lean.head.skinny is not None, lean.head.packed is not None] == [gemm == "skinny", gemm == "mkl-packed"]
        for stepper in (HFStepper(model), lean):
            out = [stepper.prefill(PROMPTS[prompts], pad_id=0)]
            stepper.repeat(2)  # 6 rows
            if stepper is lean:
                assert (lean.native is not None) == (attention == "native")
            tokens = torch.arange(6) * 7 + 1
            for t in range(5):
                if t in drops:
                    stepper.select(torch.tensor(drops[t]))
                    tokens = tokens[drops[t]]
                out.append(stepper.step(tokens + t))
                if isinstance(stepper, LlamaStepper):
                    caches.append(len(stepper.k[0]))
            logits.append(out)
    # the cache rows at each step: the finished row stayed until the compaction, or for good where only the
    # decoding rows' caches are read (the native attention)
    assert caches == ([6] * 5 if attention == "native" else [6, 6, 6, 3, 3])
    for ours, theirs in zip(logits[1], logits[0]):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rows", [6, 64])  # the skinny GEMM's packing; MKL's (kept the same way)
def test_packed_weights_follow_the_model_from_one_decode_to_the_next(rows):
    from rlvr.rollout import native, stepper

    if rows == 6 and native.library() is None:
        pytest.skip("rlvr's native kernels cannot be built here (no C compiler or no AVX2+FMA)")
    if rows == 64 and not stepper._mkl_packs():
        pytest.skip("MKL's packed GEMM does not run here")
    model = _model("qwen2")
    packing = (lambda s: s.head.skinny) if rows == 6 else (lambda s: s.gate_up[0].packed)

    def decode(stepper):
        out = [stepper.prefill(PROMPTS["shared prefix"], pad_id=0)]
        stepper.repeat(2)
        return out + [stepper.step(torch.arange(6) * 5 + 1)]

    with torch.no_grad():
        first = LlamaStepper(model, max_new_tokens=4, rows=rows)
        assert packing(LlamaStepper(model, max_new_tokens=4, rows=rows)) is packing(first)  # nothing changed
        for param in model.parameters():  # an optimizer step: in place, the same tensors
            param.mul_(1.25)
        lean, own = decode(LlamaStepper(model, max_new_tokens=4, rows=rows)), decode(HFStepper(model))
    for ours, theirs in zip(lean, own):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_one_prompt_many_rows():
    model = _model("llama")  # one prompt's rows share its keys and values; none finishes
    with torch.no_grad():
        out = []
        for stepper in (HFStepper(model), LlamaStepper(model, max_new_tokens=4)):
            logits = [stepper.prefill([[5, 9, 13, 20, 7]], pad_id=0)]
            stepper.repeat(3)
            logits += [stepper.step(torch.tensor([3, 8, 21]) + t) for t in range(3)]
            out.append(logits)
    for ours, theirs in zip(out[1], out[0]):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_adapters_and_autocast_keep_the_models_own_forward():
    from peft import LoraConfig, get_peft_model

    model = _model("llama")
    assert isinstance(make_stepper(model, 4), LlamaStepper)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert isinstance(make_stepper(model, 4), HFStepper)
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert isinstance(make_stepper(lora, 4), HFStepper)
