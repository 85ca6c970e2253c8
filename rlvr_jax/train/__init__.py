"""Trainers: supervised fine-tuning (SFT), evaluation (pass@k) and the tiny warm-start models."""

from rlvr_jax.train.evaluate import evaluate_task, pass_at_k
from rlvr_jax.train.sft import (
    SFTResult,
    TrainState,
    encode_example,
    encode_prompt,
    end_of_turn_id,
    make_optimizer,
    make_train_step,
    pad_batch,
    sft_loss,
    train_sft,
)

__all__ = [
    "SFTResult",
    "TrainState",
    "encode_example",
    "encode_prompt",
    "end_of_turn_id",
    "evaluate_task",
    "make_optimizer",
    "make_train_step",
    "pad_batch",
    "pass_at_k",
    "sft_loss",
    "train_sft",
]
