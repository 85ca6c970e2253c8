"""Rollout generation: a batched KV-cache sampler returning groups of responses."""

from rlvr_jax.sampling.sampler import Rollout, Sampler, SamplingParams
from rlvr_jax.sampling.step import filter_logits, sample_step

__all__ = ["Rollout", "Sampler", "SamplingParams", "filter_logits", "sample_step"]
