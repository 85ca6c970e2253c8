"""ISO (Isospectral Optimization; "ISO: An RLVR-Native Optimization Stack") on Countdown.

GRPO (experiments/baselines/grpo.py) whose optimizer inherits the spectrum and
optimizes the frames: every attention and MLP projection W = U diag(s) Vᵀ keeps
its singular values s from step 0; AdamW steps the frames U, Vᵀ (gradients
∂L/∂U = G V diag(s), ∂L/∂Vᵀ = diag(s) Uᵀ G) and a QR retraction re-orthonormalises
them (rlvr_jax/optim/iso.py). Embeddings and norms get plain AdamW.

Paper-fixed (abstract): fixed spectrum; a base optimizer (AdamW or Muon) on the
input/output singular frames with re-orthonormalisation; ISO-Merger for
shared-base specialists (rlvr_jax.optim.iso_merge).
Ours: the QR retraction (diag(R) > 0) as default, "polar" one override away; the
seven projections of every layer (optimizer.iso.include); no weight decay on
frames; GRPO's lr 1e-4 and schedule; G = 8, token PPO clip ε = 0.2.

Variants and overrides:
  :pulse                                   tiny random model, 2 steps (CI)
  :code                                    the synthetic code task on its base (sandbox
                                           rewards); :code,pulse its pulse
  :code,paper                              the paper scale on your code file (task
                                           code) with the code suite
  --config.optimizer.iso.base=muon         ISO-Muon (Newton–Schulz on the frame steps)
  --config.optimizer.iso.retraction=polar  polar retraction
  --config.optimizer.name=muon             plain Muon (the non-ISO comparison)

Command (the CPU run):
  taskset -c 1 nice -n 5 python -m rlvr_jax.main --config=experiments/iso/iso.py --workdir=runs/iso
Runtime here (2-core CPU, pinned to one loaded core), with the evaluation settings of
experiments/ebl (--config.eval.every=5 --config.eval.n_samples=16
--config.eval.num_problems=64): 231 CPU s, 15 min wall.
Measured (seed 0, docs/optimizers.md): pass@1 0.220 → 0.369 (AdamW, the same run
otherwise: 0.220 → 0.355); pass@16 0.672 → 0.594; the export's singular values equal
the base's to 9.4e-7 relative (AdamW: 6.6e-3).

Paper scale (`:paper`, rlvr_jax/rl/paper_scale.py): Qwen3-8B-Base (paper), 270 RL steps
(paper: AdamW's 0.495 at step 270, which ISO-AdamW reached at 100); the shared block
(ours).
Run: `--config=<file>:paper --config.model.path=<checkpoint dir>` (+
`--config.task.options` with the data path for math_file) on the v5p slice the plan row
names (docs/tpu_pods.md, `scripts/plan.py --all-paper`).
"""

from rlvr_jax.rl.config import apply_code_task, apply_variant, code_variant, default_config

PAPER = dict(model="qwen3-8b")  # paper: Qwen3-8B-Base (same shapes as Qwen3-8B)


def get_config(variant: str = ""):
    c = default_config()
    c.credit.name = "grpo"
    c.loss.name = "ppo_clip"
    c.loss.ppo_clip.eps_low = 0.2  # ε
    c.loss.ppo_clip.eps_high = 0.2
    c.data.group_size = 8  # G
    c.train.steps = 20
    c.optimizer.name = "iso"
    c.optimizer.iso.base = "adamw"  # the frames' base optimizer: "adamw" | "muon"
    c.optimizer.iso.retraction = "qr"  # "qr" | "polar"
    c.optimizer.lr = 1e-4  # the GRPO baseline's
    base, paper = code_variant(variant, PAPER)
    apply_variant(c, base, paper=paper)
    apply_code_task(c, variant)
    if base == "paper":
        c.model.path = "/path/to/Qwen3-8B-Base"  # paper: the base checkpoint
        c.train.steps = 270  # paper: the AdamW run's horizon
    return c
