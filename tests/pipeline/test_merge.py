"""Model merging: task arithmetic against NumPy, one-hot λ bitwise, HF checkpoints in and out."""

import numpy as np
import pytest

from rlvr_jax.models import init_model, load_pretrained, save_pretrained
from rlvr_jax.pipeline import merge
from rlvr_jax.testing import tiny_config, toy_tokenizer
from rlvr_jax.train.warmstart import save_tokenizer


def _tensors(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {
        "a.weight": rng.normal(size=(3, 4)).astype(dtype),
        "b.weight": np.array([-0.0, 1.0, -2.5], dtype),  # a negative zero survives one-hot λ
    }


def test_task_arithmetic_matches_numpy():
    base, s1, s2 = _tensors(0), _tensors(1), _tensors(2)
    lam = (0.7, 0.4)
    got = merge.merge_tensors(base, [s1, s2], lam)
    for n in base:
        want = base[n] + lam[0] * (s1[n] - base[n]) + lam[1] * (s2[n] - base[n])
        np.testing.assert_allclose(got[n], want, rtol=1e-6, atol=1e-6)
        assert got[n].dtype == base[n].dtype


@pytest.mark.parametrize("k", [0, 1, 2])
def test_one_hot_lambda_returns_that_specialist_bitwise(k):
    base, specs = _tensors(0), [_tensors(1), _tensors(2), _tensors(3)]
    lam = tuple(1.0 if i == k else 0.0 for i in range(3))
    got = merge.merge_tensors(base, specs, lam)
    for n in base:
        assert got[n].tobytes() == specs[k][n].tobytes()
    zero = merge.merge_tensors(base, specs, (0.0, 0.0, 0.0))
    assert all(zero[n].tobytes() == base[n].tobytes() for n in base)


def test_mismatched_specialists_and_lambdas_raise():
    base, s1 = _tensors(0), _tensors(1)
    with pytest.raises(ValueError, match="one λ per specialist"):
        merge.merge_tensors(base, [s1], (0.5, 0.5))
    bad = dict(s1, **{"a.weight": np.zeros((4, 3), np.float32)})
    with pytest.raises(ValueError, match="specialist 0 does not match"):
        merge.merge_tensors(base, [bad], (1.0,))
    with pytest.raises(ValueError, match="unknown merge method 'ties'"):
        merge.merge_tensors(base, [s1], (1.0,), method="ties")


def _checkpoint(path, seed):
    cfg = tiny_config("qwen3", vocab_size=toy_tokenizer().vocab_size)
    save_pretrained(init_model(cfg, seed=seed), cfg, path)
    save_tokenizer(toy_tokenizer(), path)
    return path


def test_merge_checkpoints_one_hot_writes_the_specialist_file(tmp_path):
    base = _checkpoint(tmp_path / "base", 0)
    s1, s2 = _checkpoint(tmp_path / "s1", 1), _checkpoint(tmp_path / "s2", 2)
    out = tmp_path / "merged"
    merge.merge_checkpoints(base, [s1, s2], (1.0, 0.0), out)
    assert (out / "model.safetensors").read_bytes() == (s1 / "model.safetensors").read_bytes()
    assert (out / "config.json").read_text() == (base / "config.json").read_text()
    assert (out / "char_tokenizer.json").is_file()
    merge.merge_checkpoints(base, [s1, s2], (0.5, 0.5), out)  # replaces it
    assert (out / "model.safetensors").read_bytes() != (s1 / "model.safetensors").read_bytes()
    assert not list(tmp_path.glob("merged.tmp*"))


@pytest.mark.parametrize("method", ["task_arithmetic", "iso"])
def test_merge_checkpoints_one_tensor_at_a_time_equals_the_whole_model_merge(
    tmp_path, monkeypatch, method
):
    base = _checkpoint(tmp_path / "base", 0)
    s1, s2 = _checkpoint(tmp_path / "s1", 1), _checkpoint(tmp_path / "s2", 2)
    whole = [merge.model_tensors(load_pretrained(d)[0]) for d in (base, s1, s2)]
    want = merge.merge_tensors(whole[0], whole[1:], (0.7, 0.4), method=method)

    reads = []
    get = merge.WeightSource.get
    monkeypatch.setattr(
        merge.WeightSource, "get", lambda self, name: reads.append(name) or get(self, name)
    )
    merge.merge_checkpoints(base, [s1, s2], (0.7, 0.4), tmp_path / "out", method=method)
    order = reads[::3]  # each tensor of the 3 models is read, merged and written, then the next
    assert reads == [n for n in order for _ in range(3)] and sorted(order) == sorted(want)
    got = merge.model_tensors(load_pretrained(tmp_path / "out")[0])
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_merge_checkpoints_refuses_another_architecture(tmp_path):
    base = _checkpoint(tmp_path / "base", 0)
    other = tmp_path / "other"
    cfg = tiny_config("qwen3", vocab_size=toy_tokenizer().vocab_size, intermediate_size=96)
    save_pretrained(init_model(cfg, seed=1), cfg, other)
    with pytest.raises(ValueError, match="specialist 0 does not match"):
        merge.merge_checkpoints(base, [other], (1.0,), None)
