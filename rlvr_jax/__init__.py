"""rlvr_jax: JAX-native reinforcement learning with verifiable rewards for language models."""

__version__ = "0.1.0"
