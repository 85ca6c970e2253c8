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
  rlsd              RLSD magnitude-only modulation A·m_t on every row        hint_logps_BxT
  cpo               CPO guided-vs-plain disagreement shaping                 hint_logps_BxT
  entropy_shaping   entropy-based advantage shaping (CPO's baseline)         -
  opsa              OPSA entropy-scaled negative advantage                   -
  opd_denoised      OPD with noisy teacher tokens removed (OPSA ablation)    teacher_logps_BxT

saf_opd's warm-up/anneal schedule takes the RL step as an argument
(`uses_step`). Groups: rstg needs a static group count; it uses the number of rows, an
upper bound on the group ids.

Policy losses (config.loss.name):
  h2sd_kl           PPO clip + λ·(failed rows) sampled-token reverse KL to the
                    hinted teacher on the current log-probs; mb needs
                    hint_logps_BxT and correct_B.
  opd_full_kl       rl_coef·PPO clip + kl_coef·full-vocabulary reverse KL to the
                    teacher (teacher_hidden signal), on all or the failed rows
                    (H²SD's full-distribution failure side).
  opd_topk_kl       the same over the teacher's top-k tokens (teacher_topk signal).
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr_jax.core import cpo as cpo_lib
from rlvr_jax.core import h2sd as h2sd_lib
from rlvr_jax.core import opd
from rlvr_jax.core import opsa as opsa_lib
from rlvr_jax.core import rlsd as rlsd_lib
from rlvr_jax.core import rstg as rstg_lib
from rlvr_jax.core import saf_opd as saf_lib
from rlvr_jax.models import vocab
from rlvr_jax.registry import in_range, one_of
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


RLSD_RULES = ("reference", "magnitude")


def _check_rlsd(c) -> None:
    o = c.credit.rlsd
    one_of("credit.rlsd.rule", o.rule, RLSD_RULES)
    in_range("credit.rlsd", o, "eps", 0.0, 1.0, lo_open=True)
    in_range("credit.rlsd", o, "lam", 0.0, 1.0)


@TRANSFORMS.register(
    "rlsd",
    requires=(HINT,),
    check=_check_rlsd,
    rule="reference",
    eps=0.2,
    lam=0.5,
    low=0.5,
    high=2.0,
    renorm=True,
)
def rlsd(adv_BxT, batch, *, rule, eps, lam, low, high, renorm):
    """RLSD: A'_t = A_t·w_t on every row; the self-teacher sets magnitudes, the reward signs.

    rule "reference" (RLSD's): w_t = 1 + λ·(clip(exp(sign(A_t)·(ℓ^H − ℓ^S)), 1 − ε,
    1 + ε) − 1) (`core.rlsd`; ε, λ = eps, lam): on failed rows the tokens the teacher
    finds unlikely take more of the penalty (the default). rule "magnitude" (ours, an
    option; the h2sd page's first RLSD arm): m_t = clip(exp(ℓ^H − ℓ^S), a, b)
    whatever the sign, renormalised to row mean 1 (H²SD's success-side modulation,
    `h2sd.success_modulation`; a, b = low, high).
    """
    mask = batch["mask_BxT"]
    if rule == "reference":
        student = batch["old_logps_BxT"]
        w = rlsd_lib.rlsd_weights(batch[HINT], student, adv_BxT, mask, eps=eps, lam=lam)
    else:
        w = h2sd_lib.success_modulation(
            batch[HINT], batch["old_logps_BxT"], mask, low=low, high=high, renorm=renorm
        )
    return jnp.where(jnp.asarray(mask, bool), adv_BxT * w, 0.0)


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


# Fields the update provides to losses that ask for them (`rl.update`): the student's
# final hidden states (entry t predicts token t) and output kernel, and the teacher's
# output kernel (the external teacher's, or the student's own, stop-gradient, for a
# self-teacher).
HIDDEN, KERNEL, TEACHER_KERNEL = "hidden_BxTxD", "output_kernel_DxV", "teacher_kernel_DxV"
KL_ROWS = ("all", "failed")


def _kl_loss(kl_BxT, logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, mb, hp):
    """rl_coef·PPO clip + kl_coef·KL_t on the selected rows (all, or the failed ones)."""
    if hp["rows"] not in KL_ROWS:
        raise ValueError(f"reverse-KL loss rows {hp['rows']!r}; valid: {KL_ROWS}")
    pg, stats = objectives.ppo_clip(
        logps_BxT,
        old_logps_BxT,
        adv_BxT,
        mask_BxT,
        eps_low=hp["eps_low"],
        eps_high=hp["eps_high"],
        dual_clip=0,
    )
    sel = jnp.asarray(mask_BxT, bool)
    if hp["rows"] == "failed":
        sel = sel & ~jnp.asarray(mb["correct_B"], bool)[:, None]
    kl = jnp.where(sel, kl_BxT, 0.0)
    return hp["rl_coef"] * pg + hp["kl_coef"] * kl, dict(stats, reverse_kl=kl)


_KL_HP = dict(rows="all", rl_coef=0.0, kl_coef=1.0, eps_low=0.2, eps_high=0.2)


@objectives.POLICY_LOSSES.register(
    "opd_full_kl",
    requires=(HIDDEN, KERNEL, TEACHER_KERNEL, "teacher_hidden_BxTxD", "correct_B"),
    chunk=8192,
    **_KL_HP,
)
def opd_full_kl(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, mb, chunk, **hp):
    """OPD with the full-vocabulary reverse KL(π_θ ‖ π_T) per token (vocabulary-chunked).

    loss_t = rl_coef·PPO(A_t) + kl_coef·KL_t on `rows` ("all"; H²SD's failure
    side: "failed"), KL_t = Σ_v π_θ(v)(log π_θ(v) − log π_T(v))
    (`models.vocab.reverse_kl`: no [B, T, V] array, forward or backward).
    """
    kl = vocab.reverse_kl(
        mb[HIDDEN], mb[KERNEL], mb["teacher_hidden_BxTxD"], mb[TEACHER_KERNEL], chunk=chunk
    )
    return _kl_loss(kl, logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, mb, hp)


@objectives.POLICY_LOSSES.register(
    "opd_topk_kl",
    requires=(HIDDEN, KERNEL, "teacher_topk_logps_BxTxK", "teacher_topk_ids_BxTxK", "correct_B"),
    **_KL_HP,
)
def opd_topk_kl(logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, *, mb, **hp):
    """OPD with the reverse KL over the teacher's top-k tokens, both renormalised on them.

    As `opd_full_kl` with KL_t = Σ_{v∈S_t} π̂_θ(v)(log π̂_θ(v) − log π̂_T(v)), S_t
    the teacher's k most likely tokens (`core.opd.topk_reverse_kl`); the
    student's logits are gathered at S_t only.
    """
    logits = opd.gather_logits(mb[HIDDEN], mb[KERNEL], mb["teacher_topk_ids_BxTxK"])
    kl = opd.topk_reverse_kl(logits, mb["teacher_topk_logps_BxTxK"])
    return _kl_loss(kl, logps_BxT, old_logps_BxT, adv_BxT, mask_BxT, mb, hp)
