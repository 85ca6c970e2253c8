"""Registrations of the on-policy distillation / self-distillation family.

Credit transforms (config.credit.transforms), each wrapping a kernel of
rlvr_jax.core; "old_logps_BxT" (log π_old of the sampled tokens) is the
student's ℓ^S everywhere, and A_i is recovered from the incoming token
advantages as their masked row mean:

  opdvr             OPDVR gate (+ GRPD |A_i| + u, inverted-gate ablation)   teacher_logps_BxT
  opd_additive      Sequential-beats-Joint baseline A + w·(ℓ^T − ℓ^S)        teacher_logps_BxT
  opd_rescale       Sequential-beats-Joint baseline A·clip(exp(ℓ^T − ℓ^S))   teacher_logps_BxT
  saf_opd           SAF fusion A + w(s)·C(S(A_OPD))                          teacher_logps_BxT
  rstg              OPD on all-wrong groups, confidence-weighted tokens      teacher_logps_BxT
  h2sd              H²SD modulation / reverse-KL reward by verdict           hint_logps_BxT
  cpo               CPO guided-vs-plain disagreement shaping                 hint_logps_BxT
  entropy_shaping   entropy-based advantage shaping (CPO's baseline)         -
  opsa              OPSA entropy-scaled negative advantage                   -
  opd_denoised      OPD with noisy teacher tokens removed (OPSA ablation)    teacher_logps_BxT

saf_opd's warm-up/anneal schedule takes the RL step as an argument
(`uses_step`). Groups: rstg needs a static group count; it uses the number of rows, an
upper bound on the group ids.

Policy loss (config.loss.name):
  h2sd_kl           PPO clip + λ·(failed rows) sampled-token reverse KL to the
                    hinted teacher on the current log-probs; mb needs
                    hint_logps_BxT and correct_B.
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr_jax.core import cpo as cpo_lib
from rlvr_jax.core import h2sd as h2sd_lib
from rlvr_jax.core import opd
from rlvr_jax.core import opsa as opsa_lib
from rlvr_jax.core import rstg as rstg_lib
from rlvr_jax.core import saf_opd as saf_lib
from rlvr_jax.rl import objectives
from rlvr_jax.rl.credit import TRANSFORMS

TEACHER = "teacher_logps_BxT"
HINT = "hint_logps_BxT"


def _seq_adv_B(adv_BxT, batch):
    return opd.sequence_advantage(adv_BxT, batch["mask_BxT"])


@TRANSFORMS.register("opdvr", requires=(TEACHER,), gate="relu", grpd=False, u=0.0, rl_coef=0.0)
def opdvr(adv_BxT, batch, *, gate, grpd, u, rl_coef):
    """OPDVR: A'_t = rl_coef·A_t + gate(ℓ^T − ℓ^S)·(|A_i| + u if grpd else 1).

    rl_coef (ours) = 0: the gated reward replaces the advantage, as in the paper
    (OPDVR is itself an RLVR advantage; |A_i| enters only through GRPD).
    """
    m = batch["mask_BxT"]
    gated = opd.opdvr_advantages(
        batch[TEACHER],
        batch["old_logps_BxT"],
        batch["correct_B"],
        m,
        gate=gate,
        seq_adv_B=_seq_adv_B(adv_BxT, batch) if grpd else None,
        u=u,
    )
    return jnp.where(jnp.asarray(m, bool), rl_coef * adv_BxT + gated, 0.0)


@TRANSFORMS.register("opd_additive", requires=(TEACHER,), weight=1.0)
def opd_additive(adv_BxT, batch, *, weight):
    """Weighted-additive joint baseline A_t + w·(ℓ^T − ℓ^S)."""
    return opd.weighted_additive_advantages(
        adv_BxT, batch[TEACHER], batch["old_logps_BxT"], batch["mask_BxT"], weight=weight
    )


@TRANSFORMS.register("opd_rescale", requires=(TEACHER,), low=0.5, high=2.0)
def opd_rescale(adv_BxT, batch, *, low, high):
    """Teacher-modulated joint baseline A_t·clip(exp(ℓ^T − ℓ^S), a, b)."""
    return opd.teacher_modulated_advantages(
        adv_BxT, batch[TEACHER], batch["old_logps_BxT"], batch["mask_BxT"], low=low, high=high
    )


@TRANSFORMS.register(
    "saf_opd",
    requires=(TEACHER,),
    uses_step=True,
    sparsify=True,
    keep_frac=0.2,
    per_row=False,
    compress=True,
    scale=0.0,
    schedule=True,
    w_max=1.0,
    w_end=0.0,
    warmup_steps=10,
    hold_steps=0,
    anneal_steps=100,
)
def saf_opd(adv_BxT, batch, *, step, **hp):
    """SAF-OPD fusion at RL step `step`; hyperparameters as `saf_opd.saf_advantages`."""
    return saf_lib.saf_advantages(
        adv_BxT, batch[TEACHER], batch["old_logps_BxT"], batch["mask_BxT"], step, **hp
    )


@TRANSFORMS.register(
    "rstg", requires=(TEACHER,), token_select="either", keep_frac=0.2, confidence=True, coef=1.0
)
def rstg(adv_BxT, batch, **hp):
    """RSTG: confidence-weighted OPD on the selected tokens of all-wrong groups."""
    return rstg_lib.rstg_advantages(
        adv_BxT,
        batch[TEACHER],
        batch["old_logps_BxT"],
        batch["entropy_BxT"],
        batch["correct_B"],
        batch["group_B"],
        batch["valid_B"],
        batch["mask_BxT"],
        num_groups=int(batch["group_B"].shape[0]),
        **hp,
    )


@TRANSFORMS.register(
    "h2sd", requires=(HINT,), low=0.5, high=2.0, renorm=True, fail_rl_coef=1.0, kl_coef=1.0
)
def h2sd(adv_BxT, batch, **hp):
    """H²SD sampled-token credit; hint_logps_BxT: rephrasing view if correct, hint view if not."""
    return h2sd_lib.h2sd_advantages(
        adv_BxT, batch[HINT], batch["old_logps_BxT"], batch["correct_B"], batch["mask_BxT"], **hp
    )


@TRANSFORMS.register("cpo", requires=(HINT,), beta=1.0, lam_correct=0.1, lam_wrong=0.1, tau=1.0)
def cpo(adv_BxT, batch, **hp):
    """CPO: β·A_t + λ_{c_i}·b(ℓ^G − ℓ^S), ℓ^G the reference-guided log-probs (hint_logps_BxT)."""
    return cpo_lib.cpo_advantages(
        adv_BxT, batch[HINT], batch["old_logps_BxT"], batch["correct_B"], batch["mask_BxT"], **hp
    )


@TRANSFORMS.register("entropy_shaping", alpha=0.4, kappa=2.0)
def entropy_shaping(adv_BxT, batch, *, alpha, kappa):
    """Entropy-based advantage shaping A_t + min(α·H_t, |A_t|/κ)."""
    return cpo_lib.entropy_shaped_advantages(
        adv_BxT, batch["entropy_BxT"], batch["mask_BxT"], alpha=alpha, kappa=kappa
    )


@TRANSFORMS.register("opsa", c=1.0, entropy_scaled=True, per_row=False, rl_coef=0.0)
def opsa(adv_BxT, batch, **hp):
    """OPSA: −c·H_t/mean H (entropy_scaled=False: the fixed negative advantage ablation)."""
    return opsa_lib.opsa_advantages(adv_BxT, batch["entropy_BxT"], batch["mask_BxT"], **hp)


@TRANSFORMS.register("opd_denoised", requires=(TEACHER,), criterion="verdict", p_min=1e-3)
def opd_denoised(adv_BxT, batch, *, criterion, p_min):
    """OPSA ablation: plain OPD advantage with the noisy teacher tokens removed (replaces A)."""
    del adv_BxT
    return opsa_lib.denoised_opd_advantages(
        batch[TEACHER],
        batch["old_logps_BxT"],
        batch["correct_B"],
        batch["mask_BxT"],
        criterion=criterion,
        p_min=p_min,
    )


@objectives.POLICY_LOSSES.register(
    "h2sd_kl", requires=(HINT, "correct_B"), eps_low=0.2, eps_high=0.2, kl_coef=1.0
)
def h2sd_kl(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, mb, eps_low, eps_high, kl_coef):
    """PPO clip on adv_BxT plus λ·ρ_t·sg(ℓ_θ − ℓ^H) on failed rows (loss-side reverse KL)."""
    pg, stats = objectives.ppo_clip(
        logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, eps_low=eps_low, eps_high=eps_high, dual_clip=0
    )
    kl = h2sd_lib.sampled_reverse_kl_loss(logps_BxT, old_logps_BxT, mb[HINT], mask_BxT)
    failed = ~jnp.asarray(mb["correct_B"], bool)[:, None]
    kl = jnp.where(failed, kl, 0.0)
    stats = dict(stats, reverse_kl=kl)
    return pg + kl_coef * kl, stats
