"""The PPO value model: a transformer trunk with a value head, values aligned like log-probs.

Token t is the action taken in the state "tokens < t", so its value V_t is read
from the hidden state at position t − 1 (which has seen exactly those tokens).
The returned `values_BxT` therefore line up with `logps_BxT` and the response
mask: entry t is the value before token t is chosen; entry 0 is 0.

Two heads, chosen by the critic loss (`config.critic.loss`):
  "mse": a scalar head regressed with the clipped squared error;
  "hl_gauss": a categorical head (`models.heads.CategoricalValueHead`, M bins
    on [v_min, v_max]) trained by cross-entropy to HL-Gauss targets
    (`core.hl_gauss`); its value is the expected bin centre;
  "two_hot", "one_hot": the same head with the HL-Gauss paper's control targets;
  "bernoulli": two bins valued (v_min, v_max), target (1 − q, q) with
    q = (R − v_min)/(v_max − v_min): a success-probability critic.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from rlvr_jax.core import hl_gauss
from rlvr_jax.core.losses import clipped_value_loss
from rlvr_jax.models.heads import CategoricalValueHead, ScalarValueHead
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.registry import one_of

LOSSES = ("mse",) + hl_gauss.KINDS  # "mse": scalar head; the rest: categorical targets


def check_config(c) -> None:
    """`config.critic`'s loss and its categorical support; ValueError naming the field."""
    one_of("critic.loss", c.critic.loss, LOSSES)
    if c.critic.loss == "mse":
        return
    if c.critic.num_bins < 2:
        raise ValueError(f"config.critic.num_bins = {c.critic.num_bins!r}; must be >= 2")
    if not c.critic.v_min < c.critic.v_max:
        raise ValueError(
            f"config.critic.v_min = {c.critic.v_min} must be below "
            f"config.critic.v_max = {c.critic.v_max}"
        )
    if not c.critic.sigma_ratio > 0:
        raise ValueError(f"config.critic.sigma_ratio = {c.critic.sigma_ratio}; must be > 0")


class Critic(nnx.Module):
    """V(tokens < t) for every position t of a batch."""

    def __init__(
        self,
        trunk: Transformer,
        *,
        seed: int = 0,
        loss: str = "mse",
        num_bins: int = 51,
        v_min: float = -1.0,
        v_max: float = 1.0,
    ):
        """Args:
        trunk: the transformer whose final hidden states the head reads (usually a
          copy of the initial policy, as in PPO for LMs); trained with the head.
        seed: head initialisation seed.
        loss: one of LOSSES; all but "mse" get a categorical head.
        num_bins, v_min, v_max: the categorical head's support (ignored for "mse";
          "bernoulli" has 2 bins whatever num_bins says).
        """
        if loss not in LOSSES:
            raise ValueError(f"unknown critic loss {loss!r}; valid: {', '.join(LOSSES)}")
        self.trunk = trunk
        self.loss = loss
        d, rngs = trunk.config.hidden_size, nnx.Rngs(seed)
        if loss != "mse":
            m = 2 if loss == "bernoulli" else num_bins
            self.head = CategoricalValueHead(d, num_bins=m, v_min=v_min, v_max=v_max, rngs=rngs)
        else:
            self.head = ScalarValueHead(d, rngs=rngs)

    def loss_BxT(self, mb, *, value_clip: float, sigma_ratio: float):
        """The per-token critic loss of a minibatch (0 off `mb["mask_BxT"]`).

        "mse": the clipped squared error to the returns R_t (`value_clip` c around
        the old values). The categorical losses: cross-entropy to the target
        distribution of R_t on the head's support (HL-Gauss: N(R_t, σ²) binned, σ =
        `sigma_ratio` bin widths); no value clipping (it is a trust region of the
        squared error; the categorical losses train without one).

        Args:
          mb: tokens_BxT, attention_mask_BxT, mask_BxT, returns_BxT, old_values_BxT.
        """
        tokens, attention, mask = mb["tokens_BxT"], mb["attention_mask_BxT"], mb["mask_BxT"]
        if self.loss == "mse":
            values = self(tokens, attention)
            return clipped_value_loss(
                values, mb["old_values_BxT"], mb["returns_BxT"], mask, clip=value_clip
            )
        h = self.head
        probs = hl_gauss.targets(
            mb["returns_BxT"],
            self.loss,
            num_bins=h.num_bins,
            v_min=h.v_min,
            v_max=h.v_max,
            sigma_ratio=sigma_ratio,
        )
        return hl_gauss.cross_entropy(self.logits(tokens, attention), probs, mask)

    def _shift(self, x_BxT):
        """Entry t from hidden state t − 1; entry 0 (no state before it) is 0."""
        pad = ((0, 0), (1, 0)) + ((0, 0),) * (x_BxT.ndim - 2)
        return jnp.pad(x_BxT[:, :-1], pad)

    def _head_out(self, tokens_BxT, attention_mask_BxT):
        out = self.trunk.forward(tokens_BxT, attention_mask_BxT, return_hidden=True, logits="none")
        return self.head(out.hidden)

    def logits(self, tokens_BxT, attention_mask_BxT):
        """Bin logits of a categorical head, aligned like the values.

        Args:
          tokens_BxT: int token ids (any padding).
          attention_mask_BxT: 1 at real tokens.
        Returns:
          logits_BxTxM float32: entry t scores V(tokens < t); entry 0 is 0 (uniform).
        """
        if self.loss == "mse":
            raise ValueError("Critic.logits needs a categorical head; this critic is 'mse'")
        return self._shift(self._head_out(tokens_BxT, attention_mask_BxT))

    def __call__(self, tokens_BxT, attention_mask_BxT):
        """Values aligned like `scoring.token_logps`.

        Args:
          tokens_BxT: int token ids (any padding).
          attention_mask_BxT: 1 at real tokens.
        Returns:
          values_BxT float32: entry t is V(tokens < t); entry 0 is 0.
        """
        out = self._head_out(tokens_BxT, attention_mask_BxT)
        if self.loss == "bernoulli":  # bins valued (v_min, v_max), not the bin centres
            bins = hl_gauss.bin_values("bernoulli", 2, self.head.v_min, self.head.v_max)
            v_BxT = hl_gauss.decode_value(out, bins)
        else:
            v_BxT = out if self.loss == "mse" else self.head.values(out)
        return self._shift(v_BxT)


def calibration_metrics(
    values_BxT, mask_BxT, correct_B, *, loss: str, v_min: float, v_max: float, num_bins: int = 10
) -> dict[str, float]:
    """The critic's Brier score and expected calibration error against the verdicts.

    The critic's value read as a success probability p: (V − v_min)/(v_max −
    v_min) for the categorical critics (their support maps onto [0, 1]), V
    itself for "mse" (a scalar head regressed on a 0/1 reward), clipped to
    [0, 1]; the outcome is the rollout's verdict. "critic/brier" and
    "critic/ece" average over every response token (V_t predicts the
    rollout's success from its prefix); "critic/brier_first" and
    "critic/ece_first" over the first response token only (the prompt's value).

    Args:
      values_BxT: [B, T] the critic's values (aligned like log-probs).
      mask_BxT: [B, T] bool response tokens.
      correct_B: [B] bool verdicts.
      loss: the critic loss (one of LOSSES).
      v_min, v_max: the categorical support.
      num_bins: K of the ECE's probability bins.
    Returns:
      name -> float (0 when no token is masked in).
    """
    m = jnp.asarray(mask_BxT, bool)
    v = jnp.asarray(values_BxT, jnp.float32)
    p = v if loss == "mse" else (v - v_min) / (v_max - v_min)
    p = jnp.clip(p, 0.0, 1.0)
    o = jnp.broadcast_to(jnp.asarray(correct_B, jnp.float32)[:, None], p.shape)
    first = m & (jnp.cumsum(m, axis=-1) == 1)
    out = {}
    for suffix, sel in (("", m), ("_first", first)):
        out[f"critic/brier{suffix}"] = float(hl_gauss.brier_score(p, o, sel))
        out[f"critic/ece{suffix}"] = float(
            hl_gauss.expected_calibration_error(p, o, sel, num_bins=num_bins)
        )
    return out
