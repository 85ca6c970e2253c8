"""`WarmStartSpec.hash_examples`: the SFT text in the cache key of a warm-start model."""

from __future__ import annotations

import dataclasses

from rlvr_jax import tasks
from rlvr_jax.testing import toy_tokenizer
from rlvr_jax.train.warmstart import SPECS, model_dir, spec_payload
from rlvr_jax.train.warmstart_specs import WarmStartSpec


def _spec(**kw) -> WarmStartSpec:
    fields = dict(
        domain="arithmetic", role="base", task_options=(("max_operand", 9),),
        hidden_size=32, intermediate_size=64, num_layers=1, num_heads=1, num_kv_heads=1,
        head_dim=32, steps=2, batch_size=2, lr=1e-3, num_train_problems=5,
    )  # fmt: skip
    return WarmStartSpec(**{**fields, **kw})


def test_examples_enter_the_key_only_when_asked():
    plain, hashed = _spec(), _spec(hash_examples=True)
    assert "hash_examples" not in spec_payload(plain)
    assert "examples_sha256" not in spec_payload(plain)
    payload = spec_payload(hashed)
    assert payload["hash_examples"] is True and len(payload["examples_sha256"]) == 64
    tok = toy_tokenizer(128)
    assert model_dir(plain, tok) != model_dir(hashed, tok)
    # Deterministic: the same spec gives the same directory.
    assert model_dir(hashed, tok) == model_dir(_spec(hash_examples=True), tok)


def test_a_changed_generator_changes_the_directory(monkeypatch):
    """Same fields, other text: a hashed spec moves, an unhashed one does not."""
    tok = toy_tokenizer(128)
    plain = _spec(num_train_problems=6)
    hashed = _spec(num_train_problems=6, hash_examples=True)
    before = model_dir(plain, tok), model_dir(hashed, tok)
    task_cls = type(tasks.get("arithmetic"))
    original = task_cls.problems

    def reworded(self, n, split="train"):
        return [
            dataclasses.replace(p, prompt=p.prompt + " Think.") for p in original(self, n, split)
        ]

    monkeypatch.setattr(task_cls, "problems", reworded)
    # A spec that differs in no field would be served from the per-spec memo: clear it.
    from rlvr_jax.train import warmstart_specs

    warmstart_specs._examples_digest.cache_clear()
    assert model_dir(plain, tok) == before[0]
    assert model_dir(hashed, tok) != before[1]


def test_the_code_task_models_hash_their_text():
    assert SPECS["code_synth", "base"].hash_examples
    assert SPECS["code_synth", "teacher"].hash_examples
    assert not SPECS["countdown", "base"].hash_examples  # keeps its measured directory
