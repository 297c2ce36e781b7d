"""The replay's per-device median steps (savings._medians, read from the graphs' arrays) against pandas' groupby
median of the replay's device-step frame (result.device_steps), the formulation it replaced."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tracekit.analysis.replay import result, savings


def _case(rng, hosts: int):
    graphs, step_ps = [], []
    for h in range(hosts):
        devs = [f"TPU:{i}" for i in rng.permutation(int(rng.integers(1, 12)))]  # (code order != text order)
        n = int(rng.integers(0, 40))
        dev = np.sort(rng.integers(0, len(devs), n)) if rng.random() < 0.5 else rng.integers(0, len(devs), n)
        graphs.append(SimpleNamespace(host=f"host{rng.integers(0, 3)}-{h}", devices=devs, steps_dev=dev,
                                      steps_step=np.arange(n), steps_start=np.zeros(n, np.int64),
                                      steps_next=rng.integers(1, 10**9, n)))
        p = rng.integers(0, 10**12, n).astype(np.int64 if rng.random() < 0.5 else np.float64)
        if p.dtype == np.float64 and n:
            p[rng.random(n) < 0.2] = np.nan
            if rng.random() < 0.3:
                p[dev == dev[0]] = np.nan  # a device whose steps are all unknown
        step_ps.append(p)
    return SimpleNamespace(graphs=graphs), SimpleNamespace(step_ps=step_ps)


def test_medians_equal_pandas_groupby_median():
    rng = np.random.default_rng(11)
    for _ in range(200):
        j, r = _case(rng, int(rng.integers(1, 4)))
        med = result.device_steps(j, r).groupby(["host", "device"])["predicted_ps"].median()
        devices, got = savings._medians(j, r)
        assert devices == tuple(str(d) for _, d in med.index)
        want = med.to_numpy(float)
        assert got.dtype == want.dtype and len(got) == len(want)
        assert all((np.isnan(a) and np.isnan(b)) or a == b for a, b in zip(got, want))
