"""Pure RL kernels: advantages, credit transforms, losses, KL and critics on masked arrays."""
