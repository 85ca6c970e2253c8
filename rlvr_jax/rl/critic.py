"""The PPO value model: a transformer trunk with a scalar head, values aligned like log-probs.

Token t is the action taken in the state "tokens < t", so its value V_t is read
from the hidden state at position t − 1 (which has seen exactly those tokens).
The returned `values_BxT` therefore line up with `logps_BxT` and the response
mask: entry t is the value before token t is chosen; entry 0 is 0.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from rlvr_jax.models.heads import ScalarValueHead
from rlvr_jax.models.transformer import Transformer


class Critic(nnx.Module):
    """V(tokens < t) for every position t of a batch."""

    def __init__(self, trunk: Transformer, *, seed: int = 0):
        """Args:
        trunk: the transformer whose final hidden states the head reads (usually a
          copy of the initial policy, as in PPO for LMs); trained with the head.
        seed: head initialisation seed.
        """
        self.trunk = trunk
        self.head = ScalarValueHead(trunk.config.hidden_size, rngs=nnx.Rngs(seed))

    def __call__(self, tokens_BxT, attention_mask_BxT):
        """Values aligned like `scoring.token_logps`.

        Args:
          tokens_BxT: int token ids (any padding).
          attention_mask_BxT: 1 at real tokens.
        Returns:
          values_BxT float32: entry t is V(tokens < t); entry 0 is 0.
        """
        out = self.trunk.forward(tokens_BxT, attention_mask_BxT, return_hidden=True, logits="none")
        v_BxT = self.head(out.hidden)
        return jnp.pad(v_BxT[:, :-1], ((0, 0), (1, 0)))
