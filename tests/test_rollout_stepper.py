"""The loop engine's lean Llama-family forward (rlvr.rollout.stepper.LlamaStepper) gives the
logits of the model's own forward, through prefill, group repeat, row drops and decode steps."""

import pytest
import torch

from rlvr.rollout.stepper import HFStepper, LlamaStepper, make_stepper
from rlvr.scoring import left_pad


def _model(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    shape = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64)
    if kind == "qwen2":  # q, k, v carry biases
        return Qwen2ForCausalLM(Qwen2Config(**shape, tie_word_embeddings=True)).eval()
    return LlamaForCausalLM(LlamaConfig(**shape, rope_theta=500.0)).eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_lean_forward_equals_the_models_own(kind):
    model = _model(kind)
    assert LlamaStepper.supports(model)
    ids, mask = left_pad([[5, 9, 13, 20, 7], [11, 12], [3, 4, 5, 6, 7, 8, 9, 10]], pad_id=0)  # (3, 8)
    logits = []
    with torch.no_grad():
        for stepper in (HFStepper(model), LlamaStepper(model, max_new_tokens=6)):
            out = [stepper.prefill(ids, mask)]
            stepper.repeat(2)  # 6 rows
            tokens = torch.arange(6) * 7 + 1
            for t in range(5):
                if t == 2:  # rows 1 and 4 finish
                    stepper.select(torch.tensor([0, 2, 3, 5]))
                    tokens = tokens[[0, 2, 3, 5]]
                out.append(stepper.step(tokens + t))
            logits.append(out)
    for ours, theirs in zip(logits[1], logits[0]):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_adapters_and_autocast_keep_the_models_own_forward():
    from peft import LoraConfig, get_peft_model

    model = _model("llama")
    assert isinstance(make_stepper(model, 4), LlamaStepper)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert isinstance(make_stepper(model, 4), HFStepper)
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert isinstance(make_stepper(lora, 4), HFStepper)
