"""LoRA adapters on chosen projections of a Transformer: add, merge, remove, split.

An adapter is a `layers.LoRA` held in `Linear.lora`; its params are
`nnx.LoRAParam`, so "train only the adapters" is a state filter:

    add_lora(model, rank=8, alpha=16, rngs=nnx.Rngs(0))
    graphdef, lora, rest = split_lora(model)   # lora: what the optimizer sees
    grads = jax.grad(lambda lo: loss_fn(nnx.merge(graphdef, lo, rest)))(lora)
    updates, opt_state = tx.update(grads, opt_state, lora)
    nnx.update(model, optax.apply_updates(lora, updates))

(or `nnx.Optimizer(model, tx, wrt=nnx.LoRAParam)` in stateful NNX code).
Split states alias the model's variables outside jit: copy before updating.

`merge_lora` folds every adapter into its base kernel and `remove_lora` drops
them; either way the model's graph afterwards is that of a model that never had
adapters (same graphdef, same checkpoint layout).
"""

from __future__ import annotations

from collections.abc import Iterable

import jax.numpy as jnp
from flax import nnx

from rlvr_jax.models.layers import Linear, LoRA

# Projection name -> the sub-module of a Block that holds it.
_TARGETS = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}
ALL_TARGETS = tuple(_TARGETS)


def add_lora(
    model,
    *,
    targets: Iterable[str] = ALL_TARGETS,
    rank: int,
    alpha: float,
    layers: Iterable[int] | None = None,
    rngs: nnx.Rngs,
    param_dtype=jnp.float32,
) -> int:
    """Attaches a fresh zero-output LoRA adapter to the chosen projections, in place.

    Args:
      model: a Transformer (anything with `.layers[i].self_attn` / `.mlp`).
      targets: projection names, a subset of ALL_TARGETS.
      rank: R, the adapter rank.
      alpha: the update is scaled by alpha / R.
      layers: block indices to adapt (default: every block).
      rngs: initialises the A matrices (B starts at zero, so logits are unchanged).
      param_dtype: adapter storage dtype; float32 by default because the adapters
        are what trains, and optimizer steps on bfloat16 params lose precision.
    Returns:
      The number of adapters added.
    Raises:
      ValueError: unknown target, layer index out of range, or a projection that
        already has an adapter (nothing is attached in any of these cases).
    """
    # A bare string would otherwise iterate as characters; duplicates would double-attach.
    targets = tuple(dict.fromkeys((targets,) if isinstance(targets, str) else targets))
    unknown = sorted(set(targets) - set(_TARGETS))
    if unknown:
        raise ValueError(f"unknown LoRA targets {unknown}; valid: {list(ALL_TARGETS)}")
    num_layers = len(model.layers)
    indices = range(num_layers) if layers is None else tuple(layers)
    bad = [i for i in indices if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"LoRA layer indices {bad} out of range for {num_layers} layers")
    # Collect first, attach second: a bad request must not leave a half-adapted model.
    chosen: list[Linear] = []
    for i in sorted(set(indices)):
        block = model.layers[i]
        for name in targets:
            linear = getattr(getattr(block, _TARGETS[name]), name)
            if linear.lora is not None:
                raise ValueError(f"layers[{i}].{_TARGETS[name]}.{name} already has a LoRA adapter")
            chosen.append(linear)
    for linear in chosen:
        d_in, d_out = linear.kernel.shape
        adapter = LoRA(d_in, d_out, rank=rank, alpha=alpha, param_dtype=param_dtype, rngs=rngs)
        # `lora` is declared as a static None on Linear; nnx.data marks it as a sub-module.
        linear.lora = nnx.data(adapter)
    return len(chosen)


def _adapted(model) -> list[Linear]:
    # A list, not a generator: callers mutate the modules they get.
    return [m for _, m in nnx.iter_modules(model) if isinstance(m, Linear) and m.lora is not None]


def _detach(linear: Linear) -> None:
    # Back to the static None a fresh Linear has, so the graphdef matches the
    # adapter-free model (jit caches, checkpoints, nnx.update all see one structure).
    linear.lora = nnx.static(None)


def merge_lora(model) -> int:
    """Folds every adapter into its base kernel (W += A @ B * alpha / R), then removes it.

    The sum is formed in float32 and cast back to the kernel's dtype.

    Args:
      model: any NNX module tree containing `Linear` layers.
    Returns:
      The number of adapters merged.
    """
    adapted = _adapted(model)
    for linear in adapted:
        kernel = linear.kernel[...]
        merged = kernel.astype(jnp.float32) + linear.lora.delta_kernel()
        linear.kernel[...] = merged.astype(kernel.dtype)
        _detach(linear)
    return len(adapted)


def remove_lora(model) -> int:
    """Drops every adapter without merging; the base weights were never touched.

    Args:
      model: any NNX module tree containing `Linear` layers.
    Returns:
      The number of adapters removed.
    """
    adapted = _adapted(model)
    for linear in adapted:
        _detach(linear)
    return len(adapted)


def has_lora(model) -> bool:
    """True if any `Linear` in the model carries an adapter."""
    return bool(_adapted(model))


def lora_state(model) -> nnx.State:
    """The adapters' `nnx.LoRAParam` state (what an optimizer trains when only adapters train).

    Args:
      model: the adapted model.
    Returns:
      nnx.State of the A and B matrices, nested by module path.
    """
    return nnx.state(model, nnx.LoRAParam)


def split_lora(model):
    """Splits the model into (graphdef, lora_state, rest_state) for a pure loss over adapters.

    `nnx.merge(graphdef, lora_state, rest_state)` rebuilds the model, so
    `jax.grad(lambda lora: loss(nnx.merge(graphdef, lora, rest)))` differentiates
    the adapters only, and the base params never enter the optimizer.

    Args:
      model: the adapted model.
    Returns:
      (graphdef, nnx.State of LoRAParam, nnx.State of everything else).
    """
    return nnx.split(model, nnx.LoRAParam, ...)
