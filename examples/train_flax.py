"""A small Flax + Optax classifier trained for a few steps on CPU, profiled by tracekit's post-run hook.

    python examples/train_flax.py --logdir /tmp/tk-logs

Steps 5..9 are traced; when the window closes the analysis runs in a child process while training goes on, the
reports (tracekit-report.json / .html) land in /tmp/tk-logs/plugins/profile/<run>/, and the top findings are
logged. Nothing tracekit does can stop the training run.
"""
from __future__ import annotations

import argparse
import logging

import flax.linen as nn
import jax
import optax

import tracekit


class MLP(nn.Module):
    hidden: int = 512
    classes: int = 10

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logdir", default="tracekit-logs")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--fail-on", default=None, choices=["info", "warning", "error"])
    args = ap.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("tracekit").setLevel(logging.INFO)  # the hook's summary of the findings

    model = MLP()
    tx = optax.adamw(1e-3)

    @jax.jit
    def init(key):  # one compiled program instead of many small eager ones (much faster start on CPU)
        k_x, k_y, k_init = jax.random.split(key, 3)
        x = jax.random.normal(k_x, (args.batch, 128))
        y = jax.random.randint(k_y, (args.batch,), 0, 10)
        params = model.init(k_init, x)
        return params, tx.init(params), x, y

    params, opt_state, x, y = init(jax.random.PRNGKey(0))

    @jax.jit
    def train_step(params, opt_state, x, y):
        def loss_fn(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    with tracekit.profile(start_step=5, num_steps=5, logdir=args.logdir, fail_on=args.fail_on) as hook:
        for step in range(args.steps):
            hook.step(step)
            params, opt_state, loss = train_step(params, opt_state, x, y)
            if step % 5 == 4:
                print(f"step {step + 1}: loss {float(loss):.4f}", flush=True)
            else:
                loss.block_until_ready()
    print("training done", flush=True)


if __name__ == "__main__":
    main()
