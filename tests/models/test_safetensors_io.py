"""Interop of our safetensors reader/writer with the reference `safetensors` package."""

import json
import os
import re
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax.models.safetensors_io import (
    SafetensorsFile,
    write_safetensors,
    write_safetensors_lazy,
)

torch = pytest.importorskip("torch")
import safetensors.torch  # noqa: E402  (needs torch)


def _arrays(rng, scalar=True):
    """One array per dtype the checkpoints use, including a scalar and an empty tensor."""
    arrays = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((7,)).astype(np.float16),
        "i64": rng.integers(-(2**40), 2**40, (2, 2, 3), dtype=np.int64),
        "bool": rng.random((4, 3)) > 0.5,
        "f64_scalar": np.array(np.pi),
        "i32_empty": np.zeros((0, 4), np.int32),
        "u8": rng.integers(0, 255, (5,), dtype=np.uint8),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((4, 2)).astype(np.float32),
    }
    if not scalar:  # see test_writes_scalar_tensors
        arrays["f64_scalar"] = arrays["f64_scalar"].reshape(1)
    return arrays


def _raw_file(path, header: dict, data: bytes, header_len: int | None = None) -> str:
    """Writes a safetensors file by hand (for corrupt-input tests)."""
    blob = json.dumps(header).encode()
    n = len(blob) if header_len is None else header_len
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + blob + data)
    return str(path)


# --------------------------------------------------------------- reading theirs


def test_reads_files_written_by_safetensors_numpy(tmp_path):
    arrays = _arrays(np.random.default_rng(0))
    path = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np", "step": "7"})
    f = SafetensorsFile(path)
    assert sorted(f.keys()) == sorted(arrays)
    for name, want in arrays.items():
        got = f.get(name)
        assert name in f
        assert got.dtype == want.dtype, name
        assert f.shape(name) == want.shape
        np.testing.assert_array_equal(got, want)
    assert f.metadata == {"format": "np", "step": "7"}


def test_reads_bf16_written_by_safetensors_torch(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "w": torch.randn(6, 10, generator=gen).to(torch.bfloat16),
        # Values that need every bf16 mantissa bit and the extremes of the range.
        "edge": torch.tensor([1.0078125, -3.3895e38, 9.1835e-41, 0.0, -0.0]).to(torch.bfloat16),
    }
    path = tmp_path / "bf16.safetensors"
    safetensors.torch.save_file(tensors, str(path))
    f = SafetensorsFile(path)
    for name, t in tensors.items():
        got = f.get(name)
        assert got.dtype == np.dtype(ml_dtypes.bfloat16)
        # Compare the bit patterns, so -0.0 and subnormals count too.
        want_bits = t.view(torch.int16).numpy()
        np.testing.assert_array_equal(got.view(np.int16), want_bits)


def test_get_returns_a_copy_and_unknown_name_names_the_file(tmp_path):
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {"a": np.ones((2,), np.float32)})
    f = SafetensorsFile(path)
    f.get("a")[0] = 5.0  # a private copy: writing to it never reaches the file
    np.testing.assert_array_equal(f.get("a"), [1.0, 1.0])
    np.testing.assert_array_equal(SafetensorsFile(path).get("a"), [1.0, 1.0])
    with pytest.raises(KeyError, match=re.escape(str(path)) + ".*'b'"):
        f.get("b")


# ---------------------------------------------------------------- writing ours


def test_written_files_load_in_safetensors_numpy(tmp_path):
    arrays = _arrays(np.random.default_rng(1), scalar=False)
    path = tmp_path / "ours.safetensors"
    write_safetensors(path, arrays, metadata={"format": "pt", "answer": 42})
    loaded = safetensors.numpy.load_file(str(path))
    assert sorted(loaded) == sorted(arrays)
    for name, want in arrays.items():
        assert loaded[name].dtype == want.dtype, name
        np.testing.assert_array_equal(loaded[name], want)
    with safetensors.safe_open(str(path), framework="np") as f:
        # Metadata values are stringified: the format only allows str -> str.
        assert f.metadata() == {"format": "pt", "answer": "42"}


def test_written_bf16_loads_in_safetensors_torch(tmp_path):
    values = np.random.default_rng(2).standard_normal((5, 3)).astype(ml_dtypes.bfloat16)
    path = tmp_path / "bf16.safetensors"
    write_safetensors(path, {"w": values, "n": np.arange(4, dtype=np.int64)})
    loaded = safetensors.torch.load_file(str(path))
    assert loaded["w"].dtype == torch.bfloat16
    np.testing.assert_array_equal(loaded["w"].view(torch.int16).numpy(), values.view(np.int16))
    np.testing.assert_array_equal(loaded["n"].numpy(), np.arange(4))


def test_own_round_trip_preserves_order_values_and_metadata(tmp_path):
    arrays = _arrays(np.random.default_rng(3), scalar=False)
    path = tmp_path / "rt.safetensors"
    write_safetensors(path, arrays, metadata={"k": "v"})
    f = SafetensorsFile(path)
    assert f.keys() == list(arrays)
    for name, want in arrays.items():
        np.testing.assert_array_equal(f.get(name), want)
    assert f.metadata == {"k": "v"}
    assert SafetensorsFile(tmp_path / "rt.safetensors").metadata == {"k": "v"}
    write_safetensors(tmp_path / "nometa.safetensors", {"a": np.zeros(1, np.float32)})
    assert SafetensorsFile(tmp_path / "nometa.safetensors").metadata == {}


_DTYPES = [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_]


@settings(max_examples=25, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(range(len(_DTYPES))),
            st.lists(st.integers(0, 4), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=5,
    ),
    seed=st.integers(0, 2**16),
)
def test_round_trip_property(tmp_path_factory, specs, seed):
    """Any mix of dtypes/shapes (including unaligned offsets) reads back equal, both ways."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, (d, shape) in enumerate(specs):
        arrays[f"t{i}"] = (rng.standard_normal(shape) * 100).astype(_DTYPES[d])
    path = str(tmp_path_factory.mktemp("prop") / "p.safetensors")
    write_safetensors(path, arrays)
    ours, theirs = SafetensorsFile(path), safetensors.numpy.load_file(path)
    for name, want in arrays.items():
        np.testing.assert_array_equal(ours.get(name), want)
        np.testing.assert_array_equal(theirs[name], want)
        assert ours.get(name).shape == want.shape == theirs[name].shape


def test_writes_scalar_tensors(tmp_path):
    path = tmp_path / "s.safetensors"
    write_safetensors(path, {"s": np.array(1.5, np.float32)})
    assert safetensors.numpy.load_file(str(path))["s"].shape == ()
    assert SafetensorsFile(path).get("s").shape == ()


# ------------------------------------------------------------------ atomicity


def test_write_is_atomic_and_leaves_no_tmp(tmp_path):
    path = tmp_path / "a.safetensors"
    write_safetensors(path, {"a": np.ones((3,), np.float32)})
    write_safetensors(path, {"a": np.full((3,), 2.0, np.float32)})  # overwrite in place
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors"]
    np.testing.assert_array_equal(SafetensorsFile(path).get("a"), [2.0, 2.0, 2.0])


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "a.safetensors"
    write_safetensors(path, {"a": np.ones((3,), np.float32)})
    specs = {"a": (np.float32, (3,)), "b": (np.float32, (2,))}
    produce = {"a": np.zeros((3,), np.float32), "b": np.zeros((3,), np.float32)}.__getitem__
    with pytest.raises(ValueError, match=re.escape(str(path)) + r".*'b'.*float32\(3,\)"):
        write_safetensors_lazy(path, specs, produce)
    np.testing.assert_array_equal(SafetensorsFile(path).get("a"), [1.0, 1.0, 1.0])


def test_failed_write_removes_its_tmp_file(tmp_path):
    path = tmp_path / "a.safetensors"
    with pytest.raises(ValueError):
        write_safetensors_lazy(path, {"a": (np.float32, (3,))}, lambda _: np.zeros(2, np.float32))
    assert os.listdir(tmp_path) == []


def test_unsupported_dtype_is_rejected_before_writing(tmp_path):
    path = tmp_path / "c.safetensors"
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*'z'.*complex64"):
        write_safetensors(path, {"z": np.zeros(2, np.complex64)})
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------- corrupt inputs

_GOOD = {"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}


@pytest.mark.parametrize(
    "case, make, message",
    [
        ("short", lambda p: p.write_bytes(b"\x01\x02\x03"), "shorter than 8 bytes"),
        (
            "header_too_long",
            lambda p: _raw_file(p, _GOOD, b"\0" * 16, header_len=10_000),
            "declares 10000 header bytes",
        ),
        ("bad_json", lambda p: p.write_bytes(struct.pack("<Q", 5) + b"{abc}"), "corrupt .*header"),
        ("not_utf8", lambda p: p.write_bytes(struct.pack("<Q", 2) + b"\xff\xfe"), "corrupt"),
        ("not_object", lambda p: _raw_file(p, [1, 2], b""), "not a JSON object"),
        (
            "offsets_outside",
            lambda p: _raw_file(
                p, {"x": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, b"\0" * 16
            ),
            "'x' offsets 8..24",
        ),
        (
            "shape_offset_mismatch",
            lambda p: _raw_file(
                p, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, b"\0" * 16
            ),
            r"'x' offsets 0..16 do not match its shape \(3,\)",
        ),
        (
            "reversed_offsets",
            lambda p: _raw_file(
                p, {"x": {"dtype": "U8", "shape": [0], "data_offsets": [8, 0]}}, b"\0" * 16
            ),
            "'x' offsets 8..0",
        ),
        (
            "unknown_dtype",
            lambda p: _raw_file(
                p, {"x": {"dtype": "F8_E9", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2
            ),
            "'x' has a malformed or unsupported entry",
        ),
        (
            "missing_field",
            lambda p: _raw_file(p, {"x": {"dtype": "F32", "shape": [1]}}, b"\0" * 4),
            "'x' has a malformed",
        ),
        ("entry_not_dict", lambda p: _raw_file(p, {"x": 5}, b""), "'x' has a malformed"),
    ],
)
def test_corrupt_file_raises_value_error_naming_path(tmp_path, case, make, message):
    path = tmp_path / f"{case}.safetensors"
    make(path)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message):
        SafetensorsFile(path)


def test_truncated_real_file_names_the_tensor(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"a": np.ones(4, np.float32), "b": np.ones(8, np.float32)})
    os.truncate(path, os.path.getsize(path) - 4)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*'b'.*truncated"):
        SafetensorsFile(path)


def test_negative_shape_is_rejected_when_opening(tmp_path):
    path = tmp_path / "neg.safetensors"
    _raw_file(path, {"x": {"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}}, b"\0" * 16)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*'x'"):
        SafetensorsFile(path)
