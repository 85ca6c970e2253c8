"""Hugging Face checkpoint I/O: config.json + model.safetensors (single or sharded).

`load_pretrained(path)` picks the architecture from `model_type`, maps every
parameter to its transformers tensor name, and reads it from the file one
tensor at a time (host memory: the params plus about one tensor).
`save_pretrained(model, config, path)` writes the same layout back, so
transformers' `AutoModelForCausalLM.from_pretrained(path)` loads it.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.safetensors_io import SafetensorsFile, write_safetensors_lazy
from rlvr_jax.models.transformer import Transformer, abstract_model

_SINGLE = "model.safetensors"
_INDEX = "model.safetensors.index.json"
# Tensors transformers may store that carry no parameters of ours.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_DTYPE_NAMES = {jnp.float32: "float32", jnp.bfloat16: "bfloat16", jnp.float16: "float16"}


def hf_name(path: tuple) -> tuple[str, bool]:
    """Maps an NNX state path to (transformers tensor name, whether to transpose).

    Our kernels are [in, out]; torch Linear weights are [out, in].
    """
    parts = [str(p) for p in path]
    if parts == ["lm_head"]:
        return "lm_head.weight", True
    if parts == ["embed_tokens"]:
        return "model.embed_tokens.weight", False
    if "lora" in parts:
        raise ValueError(
            f"parameter {'.'.join(parts)} is a LoRA adapter; merge_lora() or remove_lora() first"
        )
    transpose = parts[-1] == "kernel"
    if transpose:
        parts[-1] = "weight"
    return "model." + ".".join(parts), transpose


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None


class WeightSource:
    """Looks tensors up across the (possibly sharded) safetensors files of a directory."""

    def __init__(self, path: str):
        single, index = os.path.join(path, _SINGLE), os.path.join(path, _INDEX)
        if os.path.exists(index):
            weight_map = _read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index}: missing 'weight_map'")
            files = {}
            self._where = {}
            for name, fname in weight_map.items():
                if fname not in files:
                    fpath = os.path.join(path, fname)
                    if not os.path.exists(fpath):
                        raise FileNotFoundError(
                            f"{index}: lists shard {fname!r}, which does not exist"
                        )
                    files[fname] = SafetensorsFile(fpath)
                if name not in files[fname]:
                    raise ValueError(f"{index}: tensor {name!r} is not in shard {fname!r}")
                self._where[name] = files[fname]
        elif os.path.exists(single):
            f = SafetensorsFile(single)
            self._where = {name: f for name in f.keys()}
        else:
            have = sorted(os.listdir(path))
            hint = (
                " (PyTorch .bin checkpoints must be converted to safetensors)"
                if any(n.endswith(".bin") for n in have)
                else ""
            )
            raise FileNotFoundError(
                f"{path}: no {_SINGLE} or {_INDEX}{hint}; directory holds {have[:10]}"
            )

    def names(self) -> set[str]:
        return set(self._where)

    def get(self, name: str) -> np.ndarray:
        return self._where[name].get(name)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._where[name].shape(name))

    def file_of(self, name: str) -> str:
        return self._where[name].path


def load_config(path: str, *, dtype=jnp.float32, compute_dtype=None) -> ModelConfig:
    """Reads `path/config.json` into a ModelConfig (see ModelConfig.from_hf_dict)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{path}: not a directory (expected a Hugging Face model directory)"
        )
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
        raise FileNotFoundError(f"{path}: no config.json")
    param_dtype = _DTYPE_NAMES[jnp.dtype(dtype).type]
    compute = _DTYPE_NAMES[jnp.dtype(compute_dtype or dtype).type]
    hf = _read_json(cfg_path)
    try:
        return ModelConfig.from_hf_dict(hf, param_dtype=param_dtype, dtype=compute)
    except ValueError as e:
        raise ValueError(f"{cfg_path}: {e}") from None


def load_pretrained(
    path, dtype=jnp.float32, *, compute_dtype=None
) -> tuple[Transformer, ModelConfig]:
    """Loads a Hugging Face model directory.

    Args:
      path: directory with config.json and model.safetensors (or a sharded
        model.safetensors.index.json).
      dtype: parameter dtype (float32 or bfloat16).
      compute_dtype: activation dtype; defaults to `dtype`.
    Returns:
      (model, config). Raises FileNotFoundError / ValueError naming the file and
      tensor on a missing directory, unknown model_type, missing or extra
      tensors, shape mismatches and corrupt files.
    """
    path = os.fspath(path)
    config = load_config(path, dtype=dtype, compute_dtype=compute_dtype)
    source = WeightSource(path)
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    used = set()
    leaves = []
    for p, var in flat:
        name, transpose = hf_name(p)
        if name not in source.names():
            raise ValueError(f"{path}: checkpoint is missing tensor {name!r} ({config.model_type})")
        raw = source.get(name)
        want = tuple(var.shape[::-1]) if transpose else tuple(var.shape)
        if tuple(raw.shape) != want:
            raise ValueError(
                f"{source.file_of(name)}: tensor {name!r} has shape {tuple(raw.shape)}, "
                f"config.json implies {want}"
            )
        arr = raw.T if transpose else raw
        # One tensor is resident at a time besides the params.
        leaves.append(var.replace(jnp.asarray(np.asarray(arr, dtype=var.dtype))))
        used.add(name)
    extra = source.names() - used
    extra = {n for n in extra if not n.endswith(_IGNORED_SUFFIXES)}
    if config.tie_word_embeddings:
        extra.discard("lm_head.weight")
    if extra:
        raise ValueError(
            f"{path}: checkpoint has tensors this {config.model_type} config does not use: "
            f"{sorted(extra)[:8]}"
        )
    state = nnx.from_flat_state(list(zip(flat.paths, leaves, strict=True)))
    return nnx.merge(graphdef, state), config


def _remove_weights(path: str) -> None:
    """Deletes config.json and every weight file of an earlier save in `path`."""
    index = os.path.join(path, _INDEX)
    names = {_SINGLE, _INDEX, "config.json"}
    if os.path.exists(index):
        try:
            names |= set(_read_json(index).get("weight_map", {}).values())
        except ValueError:
            pass  # a corrupt index is replaced anyway
    for name in names:
        if os.path.exists(os.path.join(path, name)):
            os.remove(os.path.join(path, name))


def save_pretrained(
    model: Transformer, config: ModelConfig, path, *, max_shard_bytes: int = 4 * 2**30
) -> None:
    """Writes config.json and safetensors weights that transformers loads.

    Args:
      model: the model (without LoRA adapters: merge or remove them first).
      config: its ModelConfig.
      path: output directory (created if needed).
      max_shard_bytes: above this, weights are split into shards with an index.
    """
    specs, sources = {}, {}
    for p, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, transpose = hf_name(p)
        shape = tuple(var.shape[::-1]) if transpose else tuple(var.shape)
        specs[name] = (np.dtype(var.dtype), shape)
        sources[name] = (var, transpose)

    def produce(name):
        var, transpose = sources[name]
        arr = np.asarray(jax.device_get(var[...]))
        return arr.T if transpose else arr

    save_tensors(config, specs, produce, path, max_shard_bytes=max_shard_bytes)


def hf_specs(config: ModelConfig) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """{HF tensor name: (dtype, HF shape)} of a config's parameters, in `save_pretrained`'s
    order; nothing is allocated."""
    specs = {}
    for p, var in nnx.to_flat_state(nnx.state(abstract_model(config), nnx.Param)):
        name, transpose = hf_name(p)
        specs[name] = (np.dtype(var.dtype), tuple(var.shape[::-1] if transpose else var.shape))
    return specs


def save_tensors(
    config: ModelConfig, specs: dict, produce, path, *, max_shard_bytes: int = 4 * 2**30
) -> None:
    """Writes a checkpoint tensor by tensor: `produce(name)` is called as each is written.

    Args:
      config: the ModelConfig written as config.json.
      specs: {HF tensor name: (dtype, HF shape)} in file order (`hf_specs`).
      produce: name -> np.ndarray of that dtype and shape (HF layout).
      path: output directory (created if needed).
      max_shard_bytes: above this, weights are split into shards with an index.
    """
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    hf_cfg = config.to_hf_dict()
    shards, current, size = [], {}, 0
    for name, (dtype, shape) in specs.items():
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = (dtype, shape)
        size += nbytes
    shards.append(current)
    meta = {"format": "pt"}
    _remove_weights(path)  # a stale layout must never shadow the new weights
    if len(shards) == 1:
        write_safetensors_lazy(os.path.join(path, _SINGLE), shards[0], produce, meta)
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors_lazy(os.path.join(path, fname), shard, produce, meta)
            weight_map.update({name: fname for name in shard})
        total = sum(int(np.prod(s)) * d.itemsize for d, s in specs.values())
        with open(os.path.join(path, _INDEX), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    # config.json last: a directory with a config always has complete weights.
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_cfg, f, indent=2)
