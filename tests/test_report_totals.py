"""The report's time totals and the model warnings' groups, against oracles written out here: Python integer sums
(exact at any size) and a pandas groupby of the over-roofline rows."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.model import peaks
from tracekit.report.engine import ops as ops_section


def _ops(self_ps, bound, is_async):
    n = len(self_ps)
    return pd.DataFrame({"host": pd.Categorical(["h"] * n), "is_async": np.array(is_async, bool),
                         "self_ps": np.array(self_ps, np.int64), "duration_ps": np.array(self_ps, np.int64),
                         "bound_by": pd.Categorical(bound, categories=["compute", "memory", "host_link"])})


def test_totals_are_exact_integer_sums_past_float_precision():
    big = 1 << 53  # float64 cannot hold big + 1
    ops = _ops([big, 1, 7, 5, 3], ["host_link", "host_link", "memory", None, "memory"],
               [False, False, False, False, True])
    t = ops_section.totals(ops, pd.DataFrame({"exposed_ps": []}))
    assert t.op_time_ps == big + 1 + 7 + 5  # sync rows only, the async window left out
    assert t.time_by_bound_ps == {"memory": 7, "host_link": big + 1}  # no bound (missing) and no time: absent
    assert t.op_executions == 4


def test_warning_groups_equal_a_groupby_of_the_over_rows():
    rng = np.random.default_rng(3)
    n = 400
    ops = pd.DataFrame({
        "host": pd.Categorical(["h"] * n), "device": pd.Categorical(rng.choice(["TPU:0", "TPU:1"], n)),
        "module": pd.Categorical(rng.choice(["m1", "m2"], n)), "op": pd.Categorical(rng.choice(["a", "b", "c"], n)),
        "bound_by": pd.Categorical(rng.choice(["compute", "memory"], n)),
        "efficiency": rng.choice([0.5, 1.2, 1.5, np.nan], n), "self_ps": rng.integers(1, 1000, n),
        "duration_ps": rng.integers(1, 1000, n), "is_async": np.zeros(n, bool),
        "flops": rng.random(n) * 1e9, "bytes_accessed": rng.random(n) * 1e9, "net_bytes": np.zeros(n),
        "roofline_ps": rng.random(n) * 1e3, "compute_dtype": pd.Categorical(["bf16"] * n)})
    got = peaks.warning_groups(ops, {})
    over = ops[ops["efficiency"].fillna(0) > peaks.OVER]
    want = []
    for (mod, op, bound), g in over.groupby(["module", "op", "bound_by"], sort=False, observed=True):
        best = g["efficiency"].to_numpy().argmax()  # the first row at the group's largest efficiency
        want.append((mod, op, bound, len(g), int(g["self_ps"].sum()), float(g["efficiency"].iloc[best]),
                     float(g["flops"].iloc[best]) / (g["self_ps"].iloc[best] / 1e12) if bound == "compute"
                     else float(g["bytes_accessed"].iloc[best]) / (g["self_ps"].iloc[best] / 1e12)))
    assert [(w["module"], w["op"], w["bound_by"], w["executions"], int(w["time_ps"]), w["efficiency_max"],
             w["measured_rate"]) for w in got] == want
    assert len(want) > 4
