"""completion_scores' LM-head stand-in (logits in chunks, backward written out in closed form) gives
the log-probs, entropies and gradients of autograd through the model's full logits."""

import pytest
import torch

from rlvr.algos import token_logprobs
from rlvr.scoring import completion_logits, completion_scores, forward_logits, pack


@pytest.mark.parametrize("bias", [False, True], ids=["head", "head with bias"])
def test_head_stand_in_equals_autograd_through_the_full_logits(bias):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=97,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=False,
        )
    )
    if bias:  # a head with a bias (some architectures): its gradient too
        head = model.lm_head
        model.lm_head = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        model.lm_head.weight.data.copy_(head.weight.data)
        torch.nn.init.normal_(model.lm_head.bias, std=0.5)
    # the last completion's final token is masked out (an environment's token): not counted
    batch = pack([[5, 9, 13], [11, 12, 3, 4]], [[7, 8, 20, 21, 1], [30, 31]], 0, [[1, 1, 1, 1, 1], [1, 0]])
    coef_logp, coef_entropy = torch.randn(batch.targets.shape), torch.randn(batch.targets.shape)
    results = []
    for stand_in in (True, False):
        model.zero_grad()
        if stand_in:  # chunks of 3 tokens: several chunks, the last one short
            logp, entropy = completion_scores(model, batch, temperature=0.7, chunk_tokens=3)
        else:
            logits = completion_logits(forward_logits(model, batch), batch) / 0.7
            logp, entropy = (t * batch.mask for t in token_logprobs(logits, batch.targets))
        ((logp * coef_logp).sum() + (entropy * coef_entropy).sum()).backward()
        results.append((logp.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (logp, entropy, grads), (logp_ref, entropy_ref, grads_ref) = results
    assert (logp[batch.mask == 0] == 0).all() and (logp[batch.mask > 0] < 0).all()
    torch.testing.assert_close(logp, logp_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(entropy, entropy_ref, atol=1e-6, rtol=1e-5)
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grad, grads_ref[name], atol=1e-6, rtol=1e-5, msg=name)
