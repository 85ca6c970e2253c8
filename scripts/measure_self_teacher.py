"""Is the self-teacher informative? Hinted vs plain pass@1, sign agreement with the first mistake.

The self-distillation methods (DASH, CPO, H²SD, CSCR) score the policy's own
samples under a privileged-context view (`rlvr_jax.train.privileged.VIEWS`).
For a warm-start base this script measures:

  1. pass@1 of the same model under each view vs the plain prompt (test
     problems; the hinted prompt is the view, the verifier unchanged). A
     teacher that reads its context scores well above the plain model under
     "solution" and "asserted_correct", and below it under "asserted_incorrect".
  2. Samples plain-prompt responses, scores the sampled tokens under the
     "solution" view (ℓ^H) and reports the OPSA teacher-noise statistics
     (`core.opsa.teacher_noise_stats`) and the mean ℓ^H − ℓ^S on correct and
     wrong rows. On tasks with an exact first-wrong-step locator (arithmetic)
     it also locates the first mistaken token k of each wrong response and
     reports how often sign(ℓ^H − ℓ^S) agrees with Cliff's labels (+ before k,
     − from k on; `core.opsa.mistake_sign_agreement`).

Usage:
  python scripts/measure_self_teacher.py --domain arithmetic            # the registered base
  python scripts/measure_self_teacher.py --domain arithmetic --plain    # no privileged examples
  python scripts/measure_self_teacher.py --domain arithmetic --json runs/st.json
  python scripts/measure_self_teacher.py --domain arithmetic --steps 800 --share 0.5 \
      --train-views solution solution rephrase                           # a variant spec

Models come from the warm-start cache (trained first when missing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time

import jax
import numpy as np
from flax import nnx

from rlvr_jax.core import opsa
from rlvr_jax.models import load_pretrained
from rlvr_jax.rl import signals
from rlvr_jax.rl.methods import model_signals, task_signals
from rlvr_jax.rl.update import make_scorer
from rlvr_jax.sampling.sampler import Sampler, SamplingParams
from rlvr_jax.tasks.base import CORRECT
from rlvr_jax.tokenizers import cut_at_stop, encode_prompt
from rlvr_jax.train import privileged, warmstart
from rlvr_jax.train.evaluate import evaluate_task

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ViewTask:
    """A task whose prompts are rendered in a privileged view; verification unchanged."""

    task: object
    template: str

    @property
    def name(self) -> str:
        return self.task.name

    def problems(self, n, split="train", start=0):
        return [
            dataclasses.replace(p, prompt=privileged.render_view(self.template, p))
            for p in self.task.problems(n, split, start)
        ]

    def verify(self, problem, response):
        return self.task.verify(problem, response)

    def group_metrics(self, problem, responses):  # the task's (Countdown: coverage, entropy)
        return self.task.group_metrics(problem, responses)


def pass_at_1(model, tokenizer, task, args) -> dict:
    res = evaluate_task(
        model,
        tokenizer,
        task,
        split="test",
        num_problems=args.problems,
        n_samples=args.samples,
        temperature=1.0,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    return {"pass@1": res["pass@1"], "reasons": dict(res["reasons"])}


def token_signal(model, tokenizer, task, args) -> dict:
    """Plain-prompt samples, ℓ^S and ℓ^H under the solution view (and, with a step
    locator, their first mistakes)."""
    locate = task_signals.step_locator(task)
    problems = task.problems(args.problems, "test")
    stop_ids = tokenizer.stop_ids
    params = SamplingParams(
        temperature=1.0, max_new_tokens=args.max_new_tokens, stop_token_ids=stop_ids, n=args.samples
    )
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    sampler = Sampler(model, pad_id=pad)
    graphdef, params_, rest = nnx.split(model, nnx.Param, ...)
    scorer = make_scorer(graphdef)
    key = jax.random.PRNGKey(args.seed + 1)
    totals: dict[str, list] = {}
    for lo in range(0, len(problems), 32):
        chunk = problems[lo : lo + 32]
        ro = sampler.sample(
            [encode_prompt(tokenizer, p.prompt) for p in chunk], params, jax.random.fold_in(key, lo)
        )
        rows_problems = [chunk[int(g)] for g in ro.group]
        correct = np.array(
            [
                task.verify(p, tokenizer.decode(cut_at_stop(ro.sampled_tokens(b), stop_ids))).reason
                == CORRECT
                for b, p in enumerate(rows_problems)
            ]
        )
        valid = np.ones(len(correct), bool)
        rows = task_signals.decode_rows(
            tokenizer, rows_problems, ro.tokens, ro.response_mask, valid
        )
        first = (
            task_signals.first_mistake_indices(locate, rows, ~correct)
            if locate is not None
            else np.zeros(len(correct), np.int32)
        )
        prompts = [
            encode_prompt(tokenizer, privileged.render_view(privileged.SOLUTION_VIEW, p))
            for p in rows_problems
        ]
        layout = model_signals.relayout(
            prompts, ro.tokens, ro.attention_mask, ro.prompt_mask, pad_id=pad
        )
        lp = signals.map_row_chunks(
            scorer, (params_, rest), (layout.tokens, layout.attention_mask), chunk=64
        ).astype(np.float32)
        hint = model_signals.map_back(lp, layout, ro.tokens.shape[1])
        for name, arr in (
            ("hint", hint),
            ("student", ro.logps),
            ("mask", ro.response_mask),
            ("first", first),
            ("correct", correct),
        ):
            totals.setdefault(name, []).append(arr)
    width = max(a.shape[1] for a in totals["mask"])

    def cat(name):
        arrs = totals[name]
        if arrs[0].ndim == 1:
            return np.concatenate(arrs)
        return np.concatenate([np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrs])

    h, s, m, k, c = (cat(n) for n in ("hint", "student", "mask", "first", "correct"))
    out = {}
    if locate is not None:
        out.update({key: float(v) for key, v in opsa.mistake_sign_agreement(h, s, k, m).items()})
    out.update({k_: float(v) for k_, v in opsa.teacher_noise_stats(h, s, c, m).items()})
    r = np.where(m, h - s, 0.0)
    for label, sel in (("correct", c), ("wrong", ~c)):
        tokens = m & sel[:, None]
        out[f"mean_r_{label}"] = float(r[tokens].mean()) if tokens.any() else float("nan")
    out["rows"], out["wrong_rows"] = int(len(c)), int((~c).sum())
    return out


def measure(spec, args) -> dict:
    info = warmstart.train_warm_start(spec)
    model, _ = load_pretrained(info["path"])
    tokenizer = warmstart.load_model_tokenizer(info["path"])
    task = spec.task()
    start = time.process_time()
    out = {
        "model": info["path"].rsplit("/", 1)[-1],
        "privileged_share": spec.privileged_share,
        "train_eval_pass@1": (info.get("eval") or {}).get("pass@1"),
        "plain": pass_at_1(model, tokenizer, task, args),
    }
    for view in args.views:
        out[view] = pass_at_1(model, tokenizer, ViewTask(task, privileged.VIEWS[view][0]), args)
    out["token_signal"] = token_signal(model, tokenizer, task, args)
    out["cpu_seconds"] = round(time.process_time() - start, 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="arithmetic", choices=warmstart.domains())
    ap.add_argument("--role", default="base", choices=warmstart.ROLES)
    ap.add_argument("--plain", action="store_true", help="the spec without privileged examples")
    ap.add_argument("--steps", type=int, help="override the spec's SFT steps")
    ap.add_argument("--share", type=float, help="override the spec's privileged_share")
    ap.add_argument(
        "--train-views", nargs="+", choices=sorted(privileged.VIEWS), help="override its views"
    )
    ap.add_argument(
        "--views", nargs="+", default=sorted(privileged.VIEWS), choices=sorted(privileged.VIEWS)
    )
    ap.add_argument("--problems", type=int, default=128)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the result to this file")
    args = ap.parse_args()  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    spec = warmstart.get_spec(args.domain, args.role)
    if args.plain:
        spec = dataclasses.replace(spec, privileged_share=0.0, privileged_views=())
    overrides = dict(
        steps=args.steps, privileged_share=args.share, privileged_views=args.train_views
    )
    overrides = {k: (tuple(v) if k == "privileged_views" else v) for k, v in overrides.items() if v}
    spec = dataclasses.replace(spec, **overrides)
    out = measure(spec, args)
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
