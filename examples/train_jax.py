"""A tiny JAX training loop with no tracekit in it, to run under `tracekit capture`:

    tracekit capture --logdir logs -o report.html -- python examples/train_jax.py --steps 20

Each step is marked with jax.profiler.StepTraceAnnotation (what tracekit numbers the device's runs by) and waited
for, so the steps the profiler records hold their device work.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    loss = lambda w: jnp.mean((x @ w) ** 2)
    return w - 0.1 * jax.grad(loss)(w)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--size", type=int, default=512)
    args = ap.parse_args(argv)
    w, x = jnp.ones((args.size, args.size)), jnp.ones((128, args.size))
    for step in range(args.steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w = train_step(w, x).block_until_ready()
    print(f"trained {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
