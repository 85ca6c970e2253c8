"""rlvr_jax: JAX-native reinforcement learning with verifiable rewards."""

from setuptools import find_packages, setup

setup(
    name="rlvr_jax",
    version="0.1.0",
    description="JAX/TPU-native RL with verifiable rewards for language models.",
    python_requires=">=3.10",
    packages=find_packages(include=["rlvr_jax", "rlvr_jax.*"]),
    # The shipped task tokenizer and the sample math file travel with the package.
    package_data={
        "rlvr_jax": ["assets/*.model", "assets/warm_starts/*/*", "tasks/data/*.jsonl"]
    },
    install_requires=[
        "jax>=0.6",
        "flax>=0.12",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11",
        "grain>=0.2.10",
        "sentencepiece>=0.2",
        "ml-collections>=1.0",
        "absl-py>=2.0",
        "tensorboardX>=2.6",
        "safetensors>=0.4",
        "tokenizers>=0.20",
        "numpy>=1.26",
        "matplotlib>=3.7",
        # Answer checking on real math data sets, and their parquet files.
        "math-verify>=0.7",
        "pyarrow>=14",
    ],
    extras_require={
        # A Cloud TPU VM: jax with its TPU runtime (libtpu, a PyPI wheel pinned by jax).
        "tpu": ["jax[tpu]>=0.6"],
        # The Weights & Biases metrics backend (config.log.backends = "tensorboard,wandb").
        "wandb": ["wandb>=0.19.10"],
        "test": [
            "pytest>=8",
            "pytest-xdist>=3",
            "chex>=0.1.88",
            "hypothesis>=6.100",
            "ruff>=0.6",
            # Parity oracle only; 2.13.0 is the CPU wheel available offline here.
            "torch==2.13.0",
            "transformers>=4.51",
            # The W&B backend's test runs the real library offline (tests/run/test_backends.py).
            "wandb>=0.19.10",
        ],
    },
)
