"""Score-stage signals that need a model forward pass (`config.score.signals`).

  teacher      teacher_logps_BxT       log-probs of the sampled tokens under a teacher
                                       (OPD family: opdvr, opd_additive, opd_rescale,
                                       saf_opd, rstg, opd_denoised; dash)
  hint         hint_logps_BxT          the current policy's log-probs of the same tokens
                                       with privileged context in the prompt (OPSD:
                                       h2sd, cpo, the h2sd_kl loss)
  cscr_shift   cf_shift_correct_BxT,   Δ±_t = ℓ±_t − ℓ_t: the shift of the policy's
               cf_shift_incorrect_BxT  log-probs under a context asserting the answer is
                                       correct / incorrect (CSCR)

The teacher's whole next-token distribution (teacher_hidden, teacher_topk) is
in `teacher_dists`; the policy's loaded teachers and re-layout are shared.

Every field is 0 outside `mask_BxT`. A *context view* re-lays each row out as
[left padding][re-encoded prompt with the context][the row's own response
columns] (`relayout`), scores it with the policy's scorer (`ctx.policy`) in row chunks
and maps the log-probs back onto the original columns (`map_back`), so
`field[i, t]` scores the same token as `tokens_BxT[i, t]`. Prompts are rendered
from a template with the fields {prompt} (the problem's prompt), {hint}
(`task.hint(problem)`), {solution} (the reference solution) and {response}
(the decoded response of the row), then wrapped by the chat template as the
sampler's prompts are (`tokenizers.encode_prompt`).

Ours (the abstracts do not fix them): the templates and wordings below, and
that a context view is scored with the current weights (π_old, the weights that
produced old_logps_BxT).
"""

from __future__ import annotations

import dataclasses
import string

import numpy as np
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.core import opsa
from rlvr_jax.models import load_pretrained
from rlvr_jax.rl import signals
from rlvr_jax.rl.methods import task_signals
from rlvr_jax.rl.update import make_scorer
from rlvr_jax.tokenizers import encode_prompt
from rlvr_jax.train import privileged

TEMPLATE_FIELDS = ("prompt", "hint", "solution", "response")
TEACHER_SOURCES = ("warm_start", "pretrained", "hint")
# Rows are padded to a multiple of this width: few distinct shapes, few compiles.
_WIDTH_MULTIPLE = 32


# ------------------------------------------------------------------------- re-layout
@dataclasses.dataclass
class Relayout:
    """Rows re-laid out with new prompts, and where each old column went.

    Attributes:
      tokens, attention_mask: [R, N] the new rows (prompt left-padded, then the
        original row's columns from its response start on, then right padding).
      start_R: [R] first response column of each original row.
      offset_R: [R] new column = old column + offset_R for old columns >= start_R.
    """

    tokens: np.ndarray
    attention_mask: np.ndarray
    start_R: np.ndarray
    offset_R: np.ndarray


def relayout(
    prompts_R: list[list[int]],
    tokens_RxL: np.ndarray,
    attention_mask_RxL: np.ndarray,
    prompt_mask_RxL: np.ndarray,
    *,
    pad_id: int,
    multiple: int = _WIDTH_MULTIPLE,
) -> Relayout:
    """Replaces each row's prompt by `prompts_R[i]`, keeping its response columns verbatim.

    Args:
      prompts_R: the new prompt token ids of each row.
      tokens_RxL, attention_mask_RxL, prompt_mask_RxL: the rows in the sampler
        layout (prompt left-padded, then the response).
      pad_id: the id at padding positions.
      multiple: the new width is rounded up to a multiple of this.
    Returns:
      Relayout; positions follow the attention mask, so left padding does not
      change the model's output at real tokens.
    """
    rows, length = tokens_RxL.shape
    prompt_mask = np.asarray(prompt_mask_RxL, bool)
    has_prompt = prompt_mask.any(-1)
    last = length - 1 - np.argmax(prompt_mask[:, ::-1], axis=-1)
    start_R = np.where(has_prompt, last + 1, 0).astype(np.int64)
    width = max(len(p) for p in prompts_R)
    total = width + int((length - start_R).max())
    total = -(-total // multiple) * multiple
    tokens = np.full((rows, total), pad_id, tokens_RxL.dtype)
    attn = np.zeros((rows, total), attention_mask_RxL.dtype)
    for i, prompt in enumerate(prompts_R):
        tokens[i, width - len(prompt) : width] = prompt
        attn[i, width - len(prompt) : width] = 1
        tail = length - start_R[i]
        tokens[i, width : width + tail] = tokens_RxL[i, start_R[i] :]
        attn[i, width : width + tail] = attention_mask_RxL[i, start_R[i] :]
    return Relayout(tokens, attn, start_R, width - start_R)


def map_back(values_RxN: np.ndarray, layout: Relayout, length: int) -> np.ndarray:
    """values at the new columns -> [R, length, ...] at the old ones (0 before each response).

    Trailing dimensions (hidden states [R, N, D], top-k [R, N, K]) are carried along.
    """
    values = np.asarray(values_RxN)
    cols_L = np.arange(length)
    src_RxL = np.clip(cols_L[None] + layout.offset_R[:, None], 0, values.shape[1] - 1)
    extra = (1,) * (values.ndim - 2)
    out = np.take_along_axis(values, src_RxL.reshape(src_RxL.shape + extra), axis=1)
    keep = (cols_L[None] >= layout.start_R[:, None]).reshape(src_RxL.shape + extra)
    return np.where(keep, out, np.zeros((), values.dtype))


# --------------------------------------------------------------------- context views
def render_prompts(templates_R: list[str], groups, tokenizer, task, *, option: str):
    """Each row's prompt rendered from its template and encoded with the chat template.

    Args:
      templates_R: the format string of each row, over TEMPLATE_FIELDS.
      groups: the step's `rollout.Groups` (problems, group ids, response tokens).
      tokenizer: the policy's tokenizer.
      task: the run's task ({hint} needs `task.hint`).
      option: the config field the templates come from, for error messages.
    Returns:
      R token-id lists.
    """
    used_by = {}
    for template in dict.fromkeys(templates_R):
        used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        unknown = used - set(TEMPLATE_FIELDS)
        if unknown:
            raise ValueError(
                f"{option} = {template!r} uses {sorted(unknown)}; valid fields: {TEMPLATE_FIELDS}"
            )
        if "hint" in used and not hasattr(task, "hint"):
            raise ValueError(
                f"{option} uses {{hint}}, but task {task.name!r} has no hint(problem) "
                "(privileged context); tasks with one: arithmetic, multilingual_arithmetic"
            )
        used_by[template] = used
    out = []
    for i, template in enumerate(templates_R):
        used = used_by[template]
        problem = groups.problems[int(groups.group[i])]
        fields = {"prompt": problem.prompt, "solution": problem.solution}
        if "hint" in used:
            fields["hint"] = task.hint(problem)
        if "response" in used:
            fields["response"] = tokenizer.decode(groups.tokens[i][groups.response_mask[i]])
        out.append(encode_prompt(tokenizer, template.format(**fields)))
    return out


def policy_context_logps(ctx, groups, templates_R: list[str], *, option: str) -> np.ndarray:
    """[R, L] current-policy log-probs of each row's tokens with its prompt from a template.

    Args:
      ctx: the ScoreContext (its policy scorer, tokenizer, task).
      groups: the step's trimmed `rollout.Groups` (the batch's rows).
      templates_R: the prompt template of each row (see `render_prompts`).
      option: the config field the templates come from, for error messages.
    Returns:
      float32 [R, L] aligned with groups.tokens; 0 before each row's response.
    """
    prompts = render_prompts(templates_R, groups, ctx.tokenizer, ctx.task, option=option)
    layout = relayout(
        prompts, groups.tokens, groups.attention_mask, groups.prompt_mask, pad_id=ctx.pad_id
    )
    lp = ctx.policy.logps(layout.tokens, layout.attention_mask)
    return map_back(lp, layout, groups.tokens.shape[1]).astype(np.float32)


def _masked(x_BxT, batch) -> np.ndarray:
    return np.where(batch["mask_BxT"], x_BxT, 0.0).astype(np.float32)


# --------------------------------------------------------------------- diagnostics
def teacher_diagnostics(ctx, groups, batch, teacher_BxT, *, prefix: str) -> None:
    """Adds a teacher field's informativeness statistics to `ctx.metrics` as "<prefix>/<name>".

    With r_t = ℓ^T_t − ℓ^S_t (ℓ^S = old_logps_BxT): OPSA's teacher-noise
    fractions (`core.opsa.teacher_noise_stats`, criterion "verdict"), the mean
    r_t on correct and on wrong rows, and, where the task has an exact
    first-wrong-step locator (arithmetic), the per-token agreement of sign(r_t)
    with the first mistake (`core.opsa.mistake_sign_agreement`; first_mistake_B
    from the batch when a signal before provided it, else located here).
    """
    s, m = batch["old_logps_BxT"], np.asarray(batch["mask_BxT"], bool)
    correct = np.asarray(batch["correct_B"], bool)
    stats = dict(opsa.teacher_noise_stats(teacher_BxT, s, correct, m))
    locate = task_signals.step_locator(ctx.task)
    if locate is not None:
        if "first_mistake_B" in batch:
            first = batch["first_mistake_B"]
        else:
            first = task_signals.first_mistake_indices(
                locate, task_signals.step_rows(ctx, groups), ~correct
            )
        stats.update(opsa.mistake_sign_agreement(teacher_BxT, s, first, m))
    r = np.where(m, np.asarray(teacher_BxT, np.float32) - np.asarray(s, np.float32), 0.0)
    for label, rows in (("correct", correct), ("wrong", ~correct)):
        sel = m & rows[:, None]
        stats[f"r_mean_{label}"] = float(r[sel].mean()) if sel.any() else 0.0
    ctx.metrics.update({f"{prefix}/{k}": float(v) for k, v in stats.items()})


# ------------------------------------------------------------------------- teacher
def load_teacher(ctx, *, source: str, domain: str, role: str, path: str) -> signals.Scorer:
    """The teacher's Scorer, loaded once per run into `ctx.cache`.

    ValueError if the teacher's tokenizer or vocabulary differs from the policy's.
    """
    key = ("teacher", source, domain, role, path)
    if key in ctx.cache:
        return ctx.cache[key]
    from rlvr_jax.train import warmstart  # lazy: pulls in training code

    if source == "warm_start":
        domain = domain or ctx.domain
        ws = warmstart.load_warm_start(domain, role)
        model, tokenizer, what = ws.model, ws.tokenizer, f"warm start {domain}/{role}"
    elif source == "pretrained":
        if not path:
            raise ValueError("config.score.teacher.path is empty; source 'pretrained' needs it")
        model, _ = load_pretrained(path)
        tokenizer, what = warmstart.load_model_tokenizer(path), f"pretrained {path}"
    else:
        raise ValueError(f"config.score.teacher.source = {source!r}; valid: {TEACHER_SOURCES}")
    vocab = (model.config.vocab_size, ctx.policy.config.vocab_size)
    same = vocab[0] == vocab[1] and warmstart.tokenizer_fingerprint(
        tokenizer
    ) == warmstart.tokenizer_fingerprint(ctx.tokenizer)
    if not same:
        raise ValueError(
            f"config.score.teacher: the teacher ({what}; source={source!r}) does not share the "
            f"policy's tokenizer (model vocab {vocab[0]} vs {vocab[1]}, tokenizers "
            f"{type(tokenizer).__name__} vs {type(ctx.tokenizer).__name__}); token log-probs "
            "are only comparable under one tokenizer: pick a teacher (score.teacher.domain / "
            "role / path) trained with the policy's tokenizer"
        )
    if ctx.mesh is not None:  # the teacher lives on the policy's mesh, scored the same way
        nnx.update(model, sharding.shard_state(nnx.state(model), ctx.mesh, ctx.rules))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    fn = make_scorer(graphdef, mesh=ctx.mesh, rules=ctx.rules)
    if ctx.mesh is not None:  # each process's rows in, its rows out (as the policy's)
        fn = distributed.on_host_rows(fn, ctx.mesh)
    ctx.cache[key] = signals.Scorer(fn, graphdef, params, rest, model.config, ctx.chunk)
    return ctx.cache[key]


@signals.register(
    "teacher",
    provides=("teacher_logps_BxT",),
    source="warm_start",
    domain="",
    role="teacher",
    path="",
    template="{prompt}\n{hint}",
    diagnostics=True,
)
def teacher(ctx, groups, batch, *, source, domain, role, path, template, diagnostics=True):
    """ℓ^T: log-probs of the sampled tokens under a teacher (0 outside mask_BxT).

    Options:
      source: "warm_start" (the cached SFT model of `domain`/`role`, trained if
        missing), "pretrained" (a Hugging Face directory at `path` with its
        tokenizer), or "hint": a self-teacher, the current policy under the
        privileged context `template` (OPSD-style teachers such as DASH's).
      domain: warm-start domain; "" = the policy's (config.model.domain).
      role: warm-start role ("teacher" or "base").
      path: pretrained directory.
      template: the prompt template of source "hint" (fields as `render_prompts`).
      diagnostics: log `teacher_diagnostics` as "teacher/*" in the step's metrics.
    """
    if source == "hint":
        rows = len(groups.tokens)
        lp = policy_context_logps(ctx, groups, [template] * rows, option="score.teacher.template")
    else:
        scorer = load_teacher(ctx, source=source, domain=domain, role=role, path=path)
        lp = scorer.logps(batch["tokens_BxT"], batch["attention_mask_BxT"])
    lp = _masked(lp, batch)
    if diagnostics:
        teacher_diagnostics(ctx, groups, batch, lp, prefix="teacher")
    return {"teacher_logps_BxT": lp}


# ---------------------------------------------------------------------------- hint
@signals.register(
    "hint",
    provides=("hint_logps_BxT",),
    template="{prompt}\n{hint}",
    correct_template="",
    diagnostics=True,
)
def hint(ctx, groups, batch, *, template, correct_template, diagnostics=True):
    """ℓ^H: the current policy's log-probs of the sampled tokens under privileged context.

    Options:
      template: the teacher view's prompt; default "{prompt}\\n{hint}", the view the
        arithmetic / multilingual tasks document (`task.hint`: header + reference trace).
      correct_template: "" = `template` for every row; else the view of correct
        rows, e.g. H²SD's hindsight rephrasing view
        "{prompt}\\nA correct solution:\\n{response}\\nRephrase it in your own words."
        (its success branch only modulates magnitudes; failed rows keep the hint view).
      diagnostics: log `teacher_diagnostics` of ℓ^H as "hint/*" in the step's metrics.
    """
    correct = np.asarray(batch["correct_B"], bool)
    alt = correct_template or template
    templates = [alt if c else template for c in correct]
    lp = _masked(policy_context_logps(ctx, groups, templates, option="score.hint.template"), batch)
    if diagnostics:
        teacher_diagnostics(ctx, groups, batch, lp, prefix="hint")
    return {"hint_logps_BxT": lp}


# ---------------------------------------------------------------------- cscr_shift
@signals.register(
    "cscr_shift",
    provides=("cf_shift_correct_BxT", "cf_shift_incorrect_BxT"),
    correct_template=privileged.ASSERTED_CORRECT_VIEW,
    incorrect_template=privileged.ASSERTED_INCORRECT_VIEW,
    diagnostics=True,
)
def cscr_shift(ctx, groups, batch, *, correct_template, incorrect_template, diagnostics=True):
    """CSCR's counterfactual shifts Δ⁺_t = ℓ⁺_t − ℓ_t and Δ⁻_t = ℓ⁻_t − ℓ_t.

    ℓ± are the current policy's log-probs of the sampled tokens with the prompt
    rendered from `correct_template` / `incorrect_template` (contexts asserting
    the answer is correct / incorrect; wording ours), ℓ = old_logps_BxT.
    diagnostics: log `teacher_diagnostics` of ℓ⁺ and ℓ⁻ as "cscr_correct/*" and
    "cscr_incorrect/*" (an informative "incorrect" context has the opposite signs).
    """
    rows = len(groups.tokens)
    out = {}
    for field, tpl, name in (
        ("cf_shift_correct_BxT", correct_template, "correct"),
        ("cf_shift_incorrect_BxT", incorrect_template, "incorrect"),
    ):
        option = f"score.cscr_shift.{name}_template"
        lp = _masked(policy_context_logps(ctx, groups, [tpl] * rows, option=option), batch)
        if diagnostics:
            teacher_diagnostics(ctx, groups, batch, lp, prefix=f"cscr_{name}")
        out[field] = _masked(lp - batch["old_logps_BxT"], batch)
    return out
