"""One policy update on a saved batch, in one process or as a rank of an FSDP2 group (torchrun).

    python tests/fsdp_worker.py MODEL_DIR BATCH.pt OUT.pt                       # a single process
    python -m torch.distributed.run --standalone --nproc-per-node=2 tests/fsdp_worker.py MODEL_DIR BATCH.pt OUT.pt

Writes (rank 0) the updated full weights and the update's statistics to OUT.pt.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from helpers import split_settings  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.models import load_policy  # noqa: E402
from rlvr.train.parallel import Parallel  # noqa: E402
from rlvr.train.update import build_optimizer  # noqa: E402
from rlvr.train.update import policy_update  # noqa: E402

SETTINGS = dict(
    ppo_epochs=2,
    mini_batches=2,
    micro_batch_size=3,
    max_grad_norm=1.0,
    temperature=1.0,
    loss_type="token_mean",
    beta=0.05,
)


def main(model_dir: str, batch_path: str, out_path: str) -> None:
    torch.set_num_threads(1)
    strategy = "fsdp" if "RANK" in os.environ else "single"
    cfg = load_config(None, [f"train.strategy={strategy}", "train.lr=1e-3"])
    par = Parallel.create(cfg.train)
    model, tok = load_policy(cfg.model, model_dir)
    model = par.shard(model)
    optimizer = build_optimizer(cfg.train, model)
    batch = torch.load(batch_path, weights_only=False)
    stats = policy_update(
        model,
        optimizer,
        batch["completions"],
        batch["advantages"],
        batch["loss_mask"],
        batch["ref_logp"],
        tok.pad_token_id,
        split_settings(SETTINGS),
        generator=torch.Generator().manual_seed(0),
        par=par,
    )
    weights = par.full_state_dict(model)
    if par.main:
        torch.save({"weights": weights, "stats": stats, "world": par.world}, out_path)
    par.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
