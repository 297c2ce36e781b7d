"""Host transfers in flight together share their direction of the host link. The oracle is the queue written
out: transfers of B bytes started together on one direction of a link of one-way bandwidth W finish at B/W, 2B/W,
3B/W; a transfer the other way runs beside them (PCIe is full duplex). On the shared v6e trace each step starts
three 5,368,709,120-byte host-to-device copies at once (the program's host-memory parameters) and they finish about
200 ms apart: their windows and -done ops were priced as if each had the link to itself, so the second and third
-done showed 0 % efficiency and their whole time as headroom."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from conftest import shared_trace
from tracekit.model import execution, roofline

B = 5 * 1024 * 1024 * 256 * 4  # f32[5,1024,1024,256]


def test_queue_written_out():
    ops = pd.DataFrame({"host": pd.Categorical(["h"] * 5), "device": pd.Categorical(["d"] * 4 + ["e"]),
                        "start_ps": np.array([0, 0, 5, 100, 0], np.int64)})
    own = np.array([10.0, 10.0, 10.0, 10.0, 10.0])
    to_host = np.array([False, False, False, True, False])
    got = execution.queued_link_time(ops, np.arange(5), own, to_host)
    # one direction of d: started at 0, 0, 5 -> finish 10, 20, 30; the copy to host at 100 and the one on e alone
    assert got.tolist() == [10.0, 20.0, 25.0, 10.0, 10.0]
    late = execution.queued_link_time(ops.assign(start_ps=np.array([0, 50, 55, 0, 0], np.int64)), np.arange(5), own,
                                      to_host)
    assert late.tolist() == [10.0, 10.0, 15.0, 10.0, 10.0]  # the queue empties between 10 and 50


@pytest.fixture(scope="module")
def v6e():
    tr = tracekit.load(str(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")))
    return tr, roofline.join(tr)


def test_direction_of_each_copy(v6e):
    tr, _ = v6e
    h = tr.hlo[tr.hlo["opcode"].astype(str) == "copy-start"].set_index("name")
    # the copies of host-memory parameters come onto the device; the fusions' results go out to host memory
    for name in ("copy-start", "copy-start.2", "copy-start.4"):
        assert h.loc[name, "operands"].startswith("param") and not h.loc[name, "to_host"]
    for name in ("copy-start.1", "copy-start.3", "copy-start.5"):
        assert h.loc[name, "operands"].startswith("broadcast_add_fusion") and h.loc[name, "to_host"]


def test_copies_started_together_queue_on_the_link(v6e):
    tr, ops = v6e
    ch = roofline.device_chips(tr)[(str(ops["host"].iloc[0]), "TPU:0")]
    t = B / ch.host_link_bw_bytes_per_s * 1e12
    w = ops[ops["is_async"] & (ops["device"] == "TPU:0")]
    first = {}
    for k, name in enumerate(("copy-start", "copy-start.2", "copy-start.4"), 1):
        r = w[w["op"] == name]["roofline_ps"].to_numpy(float)
        assert len(r) and np.allclose(r, k * t, rtol=1e-5), name  # k-th in the queue: k x B/W
        first[name] = w[w["op"] == name]["start_ps"].to_numpy(np.int64)
    # each -done's roofline: the wait a transfer at its queued roofline leaves after the -done starts
    d = ops[(ops["op"] == "copy-done.2") & (ops["device"] == "TPU:0")].sort_values("start_ps")
    s0 = np.sort(first["copy-start.2"])[: len(d)]
    want = np.clip(s0 + 2 * t - d["start_ps"].to_numpy(np.int64), 0, d["duration_ps"].to_numpy(np.int64))
    assert np.allclose(d["roofline_ps"].to_numpy(float), want, rtol=1e-5, atol=1e3)
    assert (d["efficiency"] > 0.5).all()  # was 0: as if the copy had been done before the -done started
    assert float(ops["efficiency"].max()) <= 1.05  # and no op beats its roofline


def test_overview_host_link_work_is_the_busier_direction(v6e):
    """The possible step's host-link part is the busier direction's bytes / one-way bandwidth: the v6e steps move
    three copies each way (3 x B/W); without the copies to host, still 3 x B/W, where (to + from) / 2 gave half."""
    from tracekit.analysis import overview, rule_checks

    tr, ops = v6e
    frames = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events, modules=tr.modules)
    dchips = roofline.device_chips(tr)
    ch = dchips[(str(ops["host"].iloc[0]), "TPU:0")]
    t = B / ch.host_link_bw_bytes_per_s * 1e12
    both = overview.device_parts(ops, frames.steps, dchips)
    one_way = ops[~(ops["to_host"] & ops["is_async"])]
    only_in = overview.device_parts(one_way, frames.steps, dchips)
    for parts in (both, only_in):
        assert parts["host_link_per_step_ps"].to_numpy(float) == pytest.approx(3 * t, rel=1e-5)


def _pairs(d, w) -> set:
    assert len(d) == len(w)
    return set(zip(np.asarray(d).tolist(), np.asarray(w).tolist()))


def test_pairing_device_by_device_pairs_as_the_whole_frame(v6e, monkeypatch):
    """A long frame pairs its -done rows one device's rows at a time (smaller temporaries): the same pairs as the
    whole frame at once, on the v6e trace's four devices (every host-offload copy pairs with its window); a frame
    whose devices are not contiguous is paired whole."""
    tr, ops = v6e
    from tracekit.ingest import hlo
    d2s = hlo.done_to_start(tr.hlo)
    done = ~ops["is_async"].to_numpy(bool) & ops["opcode"].astype(str).str.endswith("-done").to_numpy()
    monkeypatch.setattr(execution, "_PER_DEVICE_ROWS", 10 ** 12)
    whole = _pairs(*execution.pair_done_windows(ops, done, d2s))
    monkeypatch.setattr(execution, "_PER_DEVICE_ROWS", 0)
    split = _pairs(*execution.pair_done_windows(ops, done, d2s))
    assert len(whole) == int(done.sum()) > 1000 and ops["device"].nunique() == 4
    assert split == whole
    shuffled = np.random.default_rng(0).permutation(len(ops))
    mixed = ops.take(shuffled).reset_index(drop=True)
    got = _pairs(*execution.pair_done_windows(mixed, done[shuffled], d2s))
    assert {(int(shuffled[a]), int(shuffled[b])) for a, b in got} == whole


def _pairs_by_hand(ops, done, d2s) -> list:
    """The pairing rule written out: per (host, device, program, -start name), the -dones in time order each take
    the latest window of their -start that starts at or before them, unless the -done before took it."""
    rows = ops.reset_index(drop=True)
    win: dict = {}
    for i, r in enumerate(rows.itertuples(index=False)):
        if r.is_async:
            win.setdefault((str(r.host), str(r.device), int(r.program_id), str(r.op)), []).append(i)
    dones: dict = {}
    for i in np.flatnonzero(done).tolist():
        r = rows.iloc[i]
        p, o = int(r["program_id"]), str(r["op"])
        key = (str(r["host"]), str(r["device"]), p, d2s.get((p, o), o.replace("-done", "-start", 1)))
        if key in win:
            dones.setdefault(key, []).append(i)
    start = rows["start_ps"].to_numpy(np.int64)
    out = []
    for key in dones:
        ws = sorted(win[key], key=lambda i: (start[i], i))
        last = None
        for d in sorted(dones[key], key=lambda i: (start[i], i)):
            before = [w for w in ws if start[w] <= start[d]]
            w = before[-1] if before else None
            if w is not None and w != last:
                out.append((d, w))
            last = w
    return sorted(out)


@pytest.mark.parametrize("seed", range(6))
def test_pairing_equals_the_rule_written_out(seed):
    """Random -start windows and -dones on two devices, several ops, equal start times: each -done's window as the
    pairing rule says, found by hand one key at a time."""
    rng = np.random.default_rng(seed)
    n = 300
    op = rng.choice(["copy-start", "copy-start.1", "all-gather-start"], n)
    is_async = rng.random(n) < 0.5
    name = np.where(is_async, op, np.char.replace(op.astype(str), "-start", "-done"))
    ops = pd.DataFrame({"host": "h", "device": pd.Categorical(rng.choice(["TPU:0", "TPU:1"], n)),
                        "program_id": rng.choice([7, 9], n).astype(np.uint64), "op": name,
                        "start_ps": rng.integers(0, 40, n) * 1000, "is_async": is_async})
    done = ~is_async & (rng.random(n) < 0.9)
    d2s = {(9, "all-gather-done"): "all-gather-start"}
    d, w = execution.pair_done_windows(ops, done, d2s)
    assert len(d) > 20
    assert sorted(zip(d.tolist(), w.tolist())) == _pairs_by_hand(ops, done, d2s)
