"""LoRA: only adapter weights train, the reference is the base with the adapter off (no copy),
the export is merged and loads in plain transformers; full fine-tuning exports the same way."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

pytest.importorskip("peft")

from rlvr.config import load_config  # noqa: E402
from rlvr.inference.reference import ReferenceModel  # noqa: E402
from rlvr.scoring import completion_logprobs  # noqa: E402
from rlvr.models import export_model, load_policy, reference_policy  # noqa: E402
from rlvr.models.lora import AdapterDisabled, is_peft  # noqa: E402
from rlvr.records import Problem  # noqa: E402
from helpers import sample, update_settings  # noqa: E402

from rlvr.rollout import SamplingParams  # noqa: E402
from rlvr.train.update import policy_update  # noqa: E402
from test_models import CHAT, one_thread, save_tiny  # noqa: E402,F401  (one_thread: autouse fixture)

SETTINGS = update_settings(ppo_epochs=2, micro_batch_size=2)


def _rollout(model, tok, seed=0):
    problems = [Problem(id="a", prompt=[{"role": "user", "content": "12+3="}]), Problem(id="b", prompt="4+5=")]
    torch.manual_seed(seed)
    return sample(model, tok, problems, SamplingParams(group_size=2, max_new_tokens=8))


def _train(model, tok, lr=1e-2):
    completions = _rollout(model, tok)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    policy_update(
        model,
        opt,
        completions,
        adv,
        torch.ones(4),
        None,
        tok.pad_token_id,
        SETTINGS,
        generator=torch.Generator().manual_seed(0),
    )
    return completions


def test_lora_trains_only_the_adapter_and_the_reference_is_the_base(tmp_path):
    original, _ = save_tiny(tmp_path)
    cfg = load_config(None, ["model.lora.enabled=true", "model.lora.r=4", "model.lora.target_modules=[q_proj,v_proj]"])
    model, tok = load_policy(cfg.model, tmp_path)
    assert is_peft(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert any("q_proj" in n for n in trainable) and not any("o_proj" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    completions = _train(model, tok)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= trainable  # the adapter moved; no base weight did
    assert any("lora_B" in n for n in changed)
    # the reference: the same object with the adapter off, equal to the untouched base model
    ref = reference_policy(model)
    assert isinstance(ref, AdapterDisabled) and ref.model is model
    ref_logp = ReferenceModel(ref, tok.pad_token_id, 1.0).logprobs(completions)
    base_logp = completion_logprobs(original, completions, tok.pad_token_id, 1.0)
    policy_logp = completion_logprobs(model, completions, tok.pad_token_id, 1.0)
    assert torch.allclose(ref_logp, base_logp, atol=1e-5)
    assert not torch.allclose(policy_logp, base_logp, atol=1e-3)  # the adapter does change the policy
    assert model.training and all(p.requires_grad for n, p in model.named_parameters() if n in trainable)


def test_merged_export_loads_in_plain_transformers_and_generates(tmp_path):
    save_tiny(tmp_path / "base")
    cfg = load_config(None, ["model.lora.enabled=true", "model.lora.r=4", "model.gradient_checkpointing=true"])
    model, tok = load_policy(cfg.model, tmp_path / "base")
    _train(model, tok, lr=5e-2)
    x = torch.tensor([[3, 4, 5, 6, 7]])
    model.eval()
    with torch.no_grad():
        expected = model(x).logits
    export_model(model, tok, tmp_path / "out")
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert "model.safetensors" in files and "config.json" in files and not any("adapter" in f for f in files)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    plain_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(plain).__name__ == "LlamaForCausalLM" and plain_tok.chat_template == CHAT
    with torch.no_grad():
        assert torch.allclose(plain(x).logits, expected, atol=1e-4)
    ids = plain_tok.apply_chat_template(
        [{"role": "user", "content": "1+2="}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = plain.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=plain_tok.pad_token_id)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_full_finetune_reference_is_a_frozen_copy_and_export_loads(tmp_path):
    save_tiny(tmp_path / "base")
    cfg = load_config(None, [])
    model, tok = load_policy(cfg.model, tmp_path / "base")
    ref = reference_policy(model)
    assert ref is not model and not is_peft(model)
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    _train(model, tok)
    assert all(torch.equal(p, before[n]) for n, p in ref.named_parameters())  # the copy never moves
    export_model(model, tok, tmp_path / "out")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    x = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(plain(x).logits, model.eval()(x).logits, atol=1e-5)
