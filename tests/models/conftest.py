"""Fixtures shared by the model tests."""

import dataclasses

import pytest

from rlvr_jax.models import load_pretrained
from rlvr_jax.testing import make_hf_checkpoint, tiny_config


@dataclasses.dataclass
class Checkpoint:
    path: str
    torch_model: object
    model: object
    config: object


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """family -> Checkpoint (a random transformers model saved to disk and loaded by us).

    Each family's checkpoint is made once per test module.
    """
    cache = {}

    def get(family):
        if family not in cache:
            path = str(tmp_path_factory.mktemp(family))
            torch_model = make_hf_checkpoint(path, tiny_config(family), seed=1)
            model, config = load_pretrained(path)
            cache[family] = Checkpoint(path, torch_model, model, config)
        return cache[family]

    return get
