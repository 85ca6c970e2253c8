"""Hugging Face checkpoint I/O: round trips through transformers, sharding, errors, memory.

Oracles: transformers' own loader and saver on the same files, and the torch
model the tiny checkpoint was made from. Most checks compare parameters bit for
bit (which implies identical logits) and run no JAX compile; our model's logits
are compared with transformers' in one test (qwen3 by default, every family
under `-m slow`).
"""

import json
import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlvr_jax.models import abstract_model, load_config, load_pretrained, save_pretrained
from rlvr_jax.models.layers import LoRA
from rlvr_jax.models.safetensors_io import SafetensorsFile, write_safetensors
from rlvr_jax.testing import tiny_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FAMILIES = ("qwen3", "qwen2", "llama")


def _ids():
    return np.random.default_rng(0).integers(3, 128, (2, 16))


def _torch_logits(torch_model):
    with torch.no_grad():
        return torch_model(input_ids=torch.from_numpy(_ids())).logits.numpy()


def _hf_load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _params(model):
    """'.'-joined path -> NumPy array of every parameter."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {".".join(map(str, p)): np.asarray(v[...]) for p, v in flat}


def _assert_same_params(a, b):
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert pa[name].dtype == pb[name].dtype, name
        np.testing.assert_array_equal(pa[name], pb[name], err_msg=name)


def _assert_same_torch_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


# ----------------------------------------------------------------- round trips


@pytest.mark.parametrize("family", FAMILIES)
def test_save_pretrained_round_trips_through_transformers(ckpt, family, tmp_path):
    c = ckpt(family)
    save_pretrained(c.model, c.config, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    reloaded = _hf_load(str(tmp_path))
    _assert_same_torch_state(reloaded, c.torch_model)
    err = np.abs(_torch_logits(reloaded) - _torch_logits(c.torch_model)).max()
    assert err <= 1e-5
    assert load_config(tmp_path) == c.config  # rope scaling, tying, biases survive
    again, _ = load_pretrained(tmp_path)
    _assert_same_params(again, c.model)


@pytest.mark.parametrize("family", FAMILIES)
def test_sharded_save_loads_in_both_loaders(ckpt, family, tmp_path):
    c = ckpt(family)
    limit = 20_000  # the 32 KB embedding gets a shard of its own; the rest pack together
    save_pretrained(c.model, c.config, tmp_path, max_shard_bytes=limit)
    files = sorted(os.listdir(tmp_path))
    shards = [f for f in files if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)]
    assert len(shards) >= 3 and "model.safetensors" not in files
    assert set(files) == {"config.json", "model.safetensors.index.json", *shards}
    with open(tmp_path / "model.safetensors.index.json") as f:
        index = json.load(f)
    sizes = {}
    for shard in shards:
        st = SafetensorsFile(tmp_path / shard)
        nbytes = [st.get(k).nbytes for k in st.keys()]
        assert sum(nbytes) <= limit or len(nbytes) == 1, shard
        sizes.update({k: (shard, n) for k, n in zip(st.keys(), nbytes, strict=True)})
    assert index["weight_map"] == {k: s for k, (s, _) in sizes.items()}
    assert index["metadata"]["total_size"] == sum(n for _, n in sizes.values())

    ours, _ = load_pretrained(tmp_path)
    _assert_same_params(ours, c.model)  # bit-identical params: identical logits
    theirs = _hf_load(str(tmp_path))
    _assert_same_torch_state(theirs, c.torch_model)
    assert np.abs(_torch_logits(theirs) - _torch_logits(c.torch_model)).max() <= 1e-5


@pytest.mark.parametrize(
    "family", ["qwen3"] + [pytest.param(f, marks=pytest.mark.slow) for f in ("qwen2", "llama")]
)
def test_sharded_save_gives_the_same_logits_in_both_loaders(ckpt, family, tmp_path):
    c = ckpt(family)
    save_pretrained(c.model, c.config, tmp_path, max_shard_bytes=20_000)
    ours, _ = load_pretrained(tmp_path)
    ref = _torch_logits(_hf_load(str(tmp_path)))
    got = nnx.jit(lambda m, ids: m(ids))(ours, jnp.asarray(_ids()))
    assert np.abs(np.asarray(got) - ref).max() <= 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_loads_a_checkpoint_sharded_by_transformers(ckpt, family, tmp_path):
    c = ckpt(family)
    c.torch_model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert os.path.exists(tmp_path / "model.safetensors.index.json")
    assert not os.path.exists(tmp_path / "model.safetensors")
    ours, config = load_pretrained(tmp_path)
    assert config == c.config
    _assert_same_params(ours, c.model)


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_bf16_round_trip(ckpt, family, tmp_path):
    c = ckpt(family)
    model, config = load_pretrained(c.path, dtype=jnp.bfloat16)
    save_pretrained(model, config, tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype="auto")
    for name, tensor in theirs.state_dict().items():
        assert tensor.dtype == torch.bfloat16, name
        want = c.torch_model.state_dict()[name].to(torch.bfloat16)
        assert torch.equal(tensor, want), name
    again, _ = load_pretrained(tmp_path, dtype=jnp.bfloat16)
    _assert_same_params(again, model)


def test_single_file_save_over_a_sharded_one_loads_the_new_weights(ckpt, tmp_path):
    c = ckpt("qwen3")
    graphdef, state = nnx.split(c.model)
    old = nnx.merge(graphdef, jax.tree.map(lambda x: np.asarray(x) + 1.0, state))
    save_pretrained(old, c.config, tmp_path, max_shard_bytes=20_000)
    save_pretrained(c.model, c.config, tmp_path)
    ours, _ = load_pretrained(tmp_path)
    _assert_same_params(ours, c.model)


# --------------------------------------------------------------------- errors


@pytest.fixture
def broken(ckpt, tmp_path):
    """A fresh copy of the qwen3 checkpoint (config.json + model.safetensors) to damage."""
    path = tmp_path / "ckpt"
    path.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(ckpt("qwen3").path, name), path / name)
    return path


def _edit_config(path, **changes):
    with open(path / "config.json") as f:
        cfg = json.load(f)
    cfg.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del cfg[key]
    with open(path / "config.json", "w") as f:
        json.dump(cfg, f, indent=2)


def _edit_tensors(path, edit):
    st = SafetensorsFile(path / "model.safetensors")
    tensors = {k: np.array(st.get(k)) for k in st.keys()}
    del st  # release the memory map before the file is replaced
    edit(tensors)
    write_safetensors(path / "model.safetensors", tensors, {"format": "pt"})


def test_missing_directory(tmp_path):
    path = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path)) + ": not a directory"):
        load_pretrained(path)


def test_file_instead_of_directory(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=re.escape(str(path)) + ": not a directory"):
        load_pretrained(path)


def test_directory_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path)) + ": no config.json"):
        load_pretrained(tmp_path)


def test_invalid_json_names_the_line(broken):
    (broken / "config.json").write_text('{\n  "model_type": "qwen3",\n  "vocab_size": 128,,\n}\n')
    with pytest.raises(ValueError, match=r"config\.json: invalid JSON at line 3 column"):
        load_pretrained(broken)


def test_unknown_model_type_lists_supported(broken):
    _edit_config(broken, model_type="gpt2")
    msg = r"config\.json: .*unknown model_type 'gpt2'; supported: \['llama', 'qwen2', 'qwen3'\]"
    with pytest.raises(ValueError, match=msg):
        load_pretrained(broken)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden_size", None, "missing field 'hidden_size'"),
        ("hidden_act", "gelu", "hidden_act='gelu' is not supported"),
        ("use_sliding_window", True, "use_sliding_window=true is not supported"),
        ("mlp_bias", True, "mlp_bias=true is not supported"),
        ("rope_scaling", {"rope_type": "yarn", "factor": 4.0}, "'yarn' is not supported"),
    ],
)
def test_unsupported_or_missing_config_field(broken, field, value, message):
    _edit_config(broken, **{field: value})
    with pytest.raises(ValueError, match=re.escape(str(broken / "config.json")) + ".*" + message):
        load_pretrained(broken)


def test_missing_num_attention_heads_is_a_clear_error(broken):
    _edit_config(broken, num_attention_heads=None)
    with pytest.raises(ValueError, match=r"config\.json.*missing field 'num_attention_heads'"):
        load_pretrained(broken)


def test_missing_tensor_is_named(broken):
    _edit_tensors(broken, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    msg = re.escape(str(broken)) + ".*missing tensor 'model.layers.1.mlp.up_proj.weight'"
    with pytest.raises(ValueError, match=msg):
        load_pretrained(broken)


def test_shape_mismatch_names_tensor_and_shapes(broken):
    _edit_config(broken, intermediate_size=96)
    # down_proj is the first MLP tensor in load order; HF stores it [out=64, in=F].
    msg = (
        re.escape(str(broken / "model.safetensors"))
        + r": tensor 'model\.layers\.0\.mlp\.down_proj\.weight' has shape \(64, 128\), "
        + r"config\.json implies \(64, 96\)"
    )
    with pytest.raises(ValueError, match=msg):
        load_pretrained(broken)


def test_unexpected_tensor_is_named(broken):
    def add(tensors):
        tensors["model.layers.2.mlp.up_proj.weight"] = np.zeros((128, 64), np.float32)

    _edit_tensors(broken, add)
    msg = r"does not use: \['model\.layers\.2\.mlp\.up_proj\.weight'\]"
    with pytest.raises(ValueError, match=re.escape(str(broken)) + ".*" + msg):
        load_pretrained(broken)


def test_truncated_weights_file(broken):
    path = broken / "model.safetensors"
    os.truncate(path, os.path.getsize(path) - 100)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*truncated file"):
        load_pretrained(broken)


def test_overwritten_header(broken):
    path = broken / "model.safetensors"
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"\x00garbage\xff" * 4)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": corrupt safetensors header"):
        load_pretrained(broken)


def test_overwritten_header_length(broken):
    path = broken / "model.safetensors"
    with open(path, "r+b") as f:
        f.write((2**40).to_bytes(8, "little"))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*declares 1099511627776"):
        load_pretrained(broken)


def test_only_pytorch_bin_gives_a_conversion_hint(broken):
    os.remove(broken / "model.safetensors")
    torch.save({"w": torch.zeros(2)}, broken / "pytorch_model.bin")
    msg = r"no model\.safetensors or .*converted to safetensors.*pytorch_model\.bin"
    with pytest.raises(FileNotFoundError, match=re.escape(str(broken)) + ": " + msg):
        load_pretrained(broken)


def test_index_naming_a_missing_shard(ckpt, tmp_path):
    c = ckpt("qwen3")
    save_pretrained(c.model, c.config, tmp_path, max_shard_bytes=20_000)
    with open(tmp_path / "model.safetensors.index.json") as f:
        shard = sorted(set(json.load(f)["weight_map"].values()))[1]
    os.remove(tmp_path / shard)
    with pytest.raises(FileNotFoundError, match=f"index.json: lists shard '{shard}'.*not exist"):
        load_pretrained(tmp_path)


def test_saving_with_lora_attached_raises(ckpt, tmp_path):
    model, config = load_pretrained(ckpt("qwen3").path)
    adapter = LoRA(64, 96, rank=2, alpha=4.0, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
    # `lora` is a static None on a fresh Linear; nnx.data makes the adapter a sub-module.
    model.layers[0].self_attn.q_proj.lora = nnx.data(adapter)
    with pytest.raises(ValueError, match=r"layers\.0\.self_attn\.q_proj\.lora.*merge_lora"):
        save_pretrained(model, config, tmp_path)
    assert not os.path.exists(tmp_path / "config.json")  # no half-written checkpoint


# --------------------------------------------------------------------- memory

_MEMORY_PROBE = r"""
import json, resource, sys
import jax
from flax import nnx
from rlvr_jax.models import load_pretrained

def status_mib(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":")) / 1024

def maxrss_mib():  # Linux reports KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

small, big = sys.argv[1], sys.argv[2]
# Warm-up on a tiny checkpoint: the same code path pays the imports, the backend
# start and the eval_shape tracing, so what follows measures the load itself.
warm, _ = load_pretrained(small)
jax.block_until_ready(nnx.state(warm))
before = dict(maxrss=maxrss_mib(), rss=status_mib("VmRSS"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM, the peak RSS of this address space, to the current RSS
model, _ = load_pretrained(big)
jax.block_until_ready(nnx.state(model))
after = dict(maxrss=maxrss_mib(), hwm=status_mib("VmHWM"), rss=status_mib("VmRSS"))
params = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model))) / 2**20
print(json.dumps(dict(before=before, after=after, params=params)))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_loading_holds_about_one_checkpoint_beyond_the_params(ckpt, tmp_path, record_property):
    # Shaped like a real checkpoint (layers dominate, the largest tensor is ~9% of
    # the file), ~88 MiB in float32.
    config = tiny_config(
        "qwen3",
        vocab_size=4096,
        hidden_size=512,
        intermediate_size=1536,
        num_layers=6,
        num_heads=8,
        num_kv_heads=4,
        head_dim=64,
    )
    big = tmp_path / "big"
    # Random weights from NumPy: init_model's eager per-shape RNG would cost seconds.
    graphdef, state = nnx.split(abstract_model(config))
    rng = np.random.default_rng(0)
    state = jax.tree.map(lambda x: rng.standard_normal(x.shape, np.float32) * 0.02, state)
    save_pretrained(nnx.merge(graphdef, state), config, big)
    ckpt_mib = os.path.getsize(big / "model.safetensors") / 2**20
    assert 60 <= ckpt_mib <= 100

    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, ckpt("qwen3").path, str(big)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    # ru_maxrss is reported but not asserted on: Linux carries the high-water mark of
    # the forking parent (this pytest process, torch and all) across exec, so in the
    # child it starts at the parent's size. VmHWM, reset just before the load, is the
    # peak of the child's own address space.
    growth = m["after"]["hwm"] - m["before"]["rss"]
    # Fixed slack: malloc arenas and XLA's host allocator keep ~25 MiB beyond the
    # params after the first large host->device copies (measured: RSS after the load
    # minus RSS before minus params); 32 MiB covers that.
    slack = 32
    bound = m["params"] + 1.0 * ckpt_mib + slack
    report = dict(m, ckpt=ckpt_mib, growth=growth, bound=bound)
    record_property("memory_mib", report)
    print("memory (MiB):", json.dumps(report))
    assert abs(m["params"] - ckpt_mib) < 1  # f32 params are the checkpoint's bytes
    assert growth <= bound
