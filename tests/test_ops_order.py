"""The loaded ops frame is in (host, device, start) order, names compared as text: the timeline stages read each
device's rows as one slice, and ``combine`` relies on ``load_host`` having sorted one host's rows. The oracle is
pandas' own stable sort of the three keys, not tracekit's ordering code."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import copied_hosts, cpu_fixture, shared_trace
from tracekit.ingest.trace import load


def _assert_sorted(ops):
    keys = ops[["host", "device", "start_ps"]].astype({"host": str, "device": str})
    order = keys.sort_values(["host", "device", "start_ps"], kind="stable").index.to_numpy()
    assert np.array_equal(order, np.arange(len(ops))), "ops are not in (host, device, start) order"


@pytest.mark.parametrize("case", ["allreduce_exposed", "sharded8"])
def test_one_host_cpu_trace_is_sorted(case):
    tr = load(cpu_fixture(case))
    assert tr.ops["device"].nunique() > 1
    _assert_sorted(tr.ops)


@pytest.mark.parametrize("rel, has_async", [("tpu/v6e-4_jax_inference.xplane.pb", True),  # windows merged in
                                            ("gpu/v100x8_tf_bert.xplane.pb", False)])
def test_one_host_third_party_trace_is_sorted(rel, has_async):
    tr = load(shared_trace(rel))
    assert bool(tr.ops["is_async"].any()) == has_async
    _assert_sorted(tr.ops)


def test_hosts_merged_in_host_order(tmp_path):
    """Two hosts whose file order is not their name order: the rows still come host by host, sorted."""
    tr = load(copied_hosts(tmp_path, ("zeta", "alpha")))
    assert set(tr.ops["host"].astype(str)) == {"zeta", "alpha"}
    _assert_sorted(tr.ops)
