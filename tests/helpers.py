"""Small builders the unit tests share."""

from __future__ import annotations

import dataclasses

from rlvr.algos import LossSettings
from rlvr.rollout import HFEngine
from rlvr.train.update import UpdateSettings

LOSS_FIELDS = {f.name for f in dataclasses.fields(LossSettings)}


def split_settings(flat: dict) -> UpdateSettings:
    """UpdateSettings from one flat dict of update and loss keys (loss_type, clip_low, beta, ...)."""
    loss = {k: v for k, v in flat.items() if k in LOSS_FIELDS}
    rest = {k: v for k, v in flat.items() if k not in LOSS_FIELDS}
    return UpdateSettings(**rest, loss=LossSettings(**loss))


def sample(model, tok, problems, params, **kwargs):
    """Completions from transformers' generate (the 'hf' engine) on `model`."""
    return HFEngine(model, tok).generate(problems, params, **kwargs)
