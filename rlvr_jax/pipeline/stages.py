"""Stage kinds of a pipeline: what each runs, from which export, and when it ends.

Every stage runs in its own directory `<workdir>/stages/<name>/` as one run
(config.json, metrics.jsonl, checkpoints, results.md, export/): it starts from
an HF checkpoint directory (`StageContext.init_dir`: the base or an earlier
stage's export), checkpoints and resumes like a single run, and ends by writing
its export. Kinds:

  rl     the RL trainer (`rl.trainer.Trainer`), run config = an RL config
  opd    the same with on-policy distillation as the credit: the teacher signal
         and the plain OPD advantage ℓ^T − ℓ^S (opdvr, gate "none", no RL term)
  dpo    DPO on verified pairs of the current policy's rollouts (`pipeline.dpo`)
  sft    supervised fine-tuning on reference solutions or a teacher's verified
         samples (`pipeline.sft`)
  merge  task vectors of earlier stages merged into one checkpoint (`pipeline.merge`)

The trainer kinds (rl, opd, dpo) can end early on a rule evaluated in-run:
`PlateauSwitch`, the stage's `switch` fields (Sequential-beats-Joint's OPD → RL
hand-over when the OPD validation score plateaus).
"""

from __future__ import annotations

import copy

import ml_collections

from rlvr_jax.pipeline import dpo, merge, rl_stage, sft
from rlvr_jax.pipeline.graph import STAGE_REF_PREFIX, stage_refs
from rlvr_jax.pipeline.stage_kind import Kind, StageContext

__all__ = ["Kind", "StageContext", "kind", "resolve"]


def kind(name: str, *, field: str = "kind") -> Kind:
    """The stage kind `name`; ValueError listing the valid kinds."""
    kinds = _kinds()
    if name not in kinds:
        raise ValueError(f"{field} = {name!r}; valid: {', '.join(sorted(kinds))}")
    return kinds[name]


def resolve(
    run: ml_collections.ConfigDict, k: Kind, init_dir: str, exports: dict, base
) -> ml_collections.ConfigDict:
    """A copy of a stage's run config pointed at its start and with "stage:<name>" resolved."""
    out = copy.deepcopy(run)
    _replace_refs(out, exports)
    k.resolve(out, init_dir, base)
    return out


def _replace_refs(d: ml_collections.ConfigDict, exports: dict[str, str]) -> None:
    for key, value in d.items():
        if isinstance(value, ml_collections.ConfigDict):
            _replace_refs(value, exports)
        elif isinstance(value, str) and stage_refs(value):
            for ref in stage_refs(value):
                value = value.replace(STAGE_REF_PREFIX + ref, exports[ref])
            d[key] = value


def _nothing(*args) -> None:
    del args


def _kinds() -> dict[str, Kind]:
    trainer = dict(
        run=rl_stage.run_trainer,
        check=rl_stage.check_rl,
        resolve=rl_stage.resolve_rl,
        pulse=rl_stage.pulse_rl,
        switchable=True,
    )
    return {
        "rl": Kind(defaults=rl_stage.rl_defaults, **trainer),
        "opd": Kind(defaults=rl_stage.opd_defaults, **trainer),
        "dpo": Kind(defaults=dpo.dpo_config, **trainer),
        "sft": Kind(
            defaults=sft.sft_config,
            run=sft.run_sft,
            check=sft.check,
            resolve=sft.resolve,
            pulse=sft.pulse,
        ),
        "merge": Kind(
            defaults=merge.merge_defaults,
            run=merge.run_merge,
            check=merge.check_merge,
            resolve=_nothing,
            pulse=_nothing,
        ),
    }
