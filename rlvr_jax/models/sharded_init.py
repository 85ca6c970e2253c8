"""Models created directly in their shards: no device holds a whole parameter it does not own."""

from __future__ import annotations

import jax
from flax import nnx
from jax.sharding import Mesh

from rlvr_jax.models.transformer import Transformer
from rlvr_jax.sharding import param_shardings


def sharded_initializer(config, mesh: Mesh, rules, seed: int = 0):
    """The graphdef and a jitted `init() -> state` that creates each param in its shards.

    The structure comes from `nnx.eval_shape` (no allocation); the initialiser
    runs under `jit` with `out_shardings`, so each device computes only its own
    shards and no device ever holds a whole parameter it does not own (lower and
    compile `init` to read XLA's per-device memory analysis without running it).

    Args:
      config: ModelConfig.
      mesh, rules: as in `logical_to_spec`.
      seed: init seed.
    Returns:
      (graphdef, init): `nnx.merge(graphdef, init())` is the model.
    """

    def build():
        return Transformer(config, rngs=nnx.Rngs(seed))

    graphdef, abstract = nnx.split(nnx.eval_shape(build))
    shardings = param_shardings(abstract, mesh, rules)
    return graphdef, jax.jit(lambda: nnx.state(build()), out_shardings=shardings)


def init_sharded(config, mesh: Mesh, rules, seed: int = 0):
    """A Transformer whose params are created directly sharded (see `sharded_initializer`).

    Values equal `models.init_model(config, seed)` up to float rounding of the
    jitted initialisers (threefry is partitionable: the same under any mesh).

    Args:
      config: ModelConfig.
      mesh, rules: as in `logical_to_spec`.
      seed: init seed.
    Returns:
      The Transformer, its params sharded by `param_shardings`.
    """
    graphdef, init = sharded_initializer(config, mesh, rules, seed)
    return nnx.merge(graphdef, init())
