"""The roofline's predictions kept once per op identity (tracekit.model.predictions): what the join writes row by
row reads back as the row arrays it replaces (an oracle of plain arrays written the same way), any selection of
rows and frames put together from two tables read the columns they replace, and whole reports are unchanged."""
import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, SHARED, shared_missing
from tracekit import columns as C, threads
from tracekit.model import predictions as P

KEYS = list(P.KEYS)  # the join's names


def _identities(rng, k):
    """Per identity, each prediction (float64, float32, int32 as the join stores them), a NaN and a 0.0 among
    them."""
    out = {}
    for key in KEYS:
        dt = np.int32 if key == "gsize" else np.float64 if key in ("flops", "bytes_accessed", "net") else np.float32
        v = rng.choice([0.0, 1.0, 2.5, 1e12], k) if dt != np.int32 else rng.integers(1, 9, k)
        v = v.astype(dt)
        if dt != np.int32:
            v[rng.random(k) < 0.2] = np.nan
        out[key] = v
    return out


def _written(rng, n=6000, k=30, writes=12, own_rows=0.3):
    """A :class:`Spread` over ``n`` rows in ``k`` identities and the oracle (row arrays, the identity's values
    spread) after the same random writes: rows with values of their own, rows written with their identity's own
    values, or all with one value, a -0.0 where the row held 0.0."""
    per = _identities(rng, k)
    inv = rng.integers(0, k, n)
    p = P.spread(dict(per), inv, k)
    oracle = {key: v[inv].copy() for key, v in per.items()}
    for _ in range(writes):
        key = KEYS[rng.integers(len(KEYS))]
        rows = np.flatnonzero(rng.random(n) < own_rows / writes)
        how = rng.integers(4)
        if how == 0:
            new = rng.random(len(rows)).astype(oracle[key].dtype)
        elif how == 1:
            new = per[key][inv[rows]]  # written without a change
        elif how == 2:
            new = np.full(len(rows), 7, oracle[key].dtype)  # every row the same
        else:
            new = np.where(oracle[key][rows] == 0, -0.0, oracle[key][rows]).astype(oracle[key].dtype)
        p[key][rows] = new
        oracle[key][rows] = new
        pick = rng.integers(0, n, 50)
        _same_bits(p[key][pick], oracle[key][pick])
    return p, oracle


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        a, b = a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
    assert (a == b).all()


def _frame(p, oracle, n):
    """The join's frame of ``p`` in a one-shot process, beside its oracle frame (the columns themselves)."""
    cols, table = P.columns_of(p, n, True)
    df = pd.DataFrame({"start_ps": np.arange(n, dtype=np.int64), **cols})
    want = pd.DataFrame({"start_ps": np.arange(n, dtype=np.int64), **{P.KEYS[k]: v for k, v in oracle.items()}})
    order = list(want.columns)
    return P.register(df, p, table, order), want, table


@pytest.fixture
def one_shot(monkeypatch):
    monkeypatch.setattr(threads, "_one_shot", True)  # a tracekit process
    monkeypatch.setattr(C, "CONSTANT_MIN_ROWS", 1)
    monkeypatch.setattr(P, "MIN_ROWS", 1)  # (a table for frames of any length)


@pytest.mark.parametrize("seed", range(4))
def test_written_rows_read_back_as_the_row_arrays(seed, one_shot):
    rng = np.random.default_rng(seed)
    n = 6000
    p, oracle = _written(rng, n)
    for key in KEYS:
        _same_bits(np.asarray(p[key]), oracle[key])
    df, want, table = _frame(p, oracle, n)
    assert P.CODE in df.columns and table and df[P.CODE].dtype == np.int32
    with pytest.raises(RuntimeError):  # entries shared again: a write would change other rows too
        p["flops"][np.arange(3)] = 1.0
    # rows written as their identity's, or all alike, share entries: far fewer entries than rows written
    entries = len(next(iter(table.values())))
    assert entries <= len({tuple(np.asarray(oracle[k])[i].tobytes() for k in KEYS) for i in range(n)})
    for c in want.columns[1:]:
        assert P.has(df, c)
        _same_bits(P.values(df, c), want[c].to_numpy())
        rows = rng.permutation(n)[: n // 3]
        _same_bits(P.values(df, c, rows), want[c].to_numpy()[rows])
        _same_bits(P.values(df, c, slice(100, 900)), want[c].to_numpy()[100:900])
        sel = df[df["start_ps"].to_numpy() % 7 == 3].sort_values(P.CODE, kind="stable")  # selected, reordered
        _same_bits(P.values(sel, c), want.loc[sel.index, c].to_numpy())
    assert not P.has(df, "headroom_ps")
    few = P.materialized(df.iloc[[5, 0, 77]])  # a few rows read whole: the columns back where they were
    pd.testing.assert_frame_equal(few, want.iloc[[5, 0, 77]])
    P.release(df)
    with pytest.raises(LookupError):
        P.values(df, "flops")


def test_columns_of_a_library_caller_of_a_short_frame_and_of_mostly_own_rows_are_the_columns(one_shot,
                                                                                            monkeypatch):
    rng = np.random.default_rng(11)
    p, oracle = _written(rng, 3000, own_rows=0.3)
    cols, table = P.columns_of(p, 3000, False)  # a library caller: the columns themselves
    assert not table
    for k, v in oracle.items():
        _same_bits(cols[P.KEYS[k]], v)
    monkeypatch.setattr(P, "MIN_ROWS", 3001)  # a frame shorter than MIN_ROWS: columns
    assert P.columns_of(_written(rng, 3000)[0], 3000, True)[1] == {}
    monkeypatch.setattr(P, "MIN_ROWS", 1)
    rng = np.random.default_rng(12)
    per = _identities(rng, 3)
    inv = rng.integers(0, 3, 3000)
    p = P.spread(dict(per), inv, 3)
    oracle = {key: v[inv].copy() for key, v in per.items()}
    rows = np.flatnonzero(rng.random(3000) < 0.7)  # most rows a value of their own
    p["memory"][rows] = oracle["memory"][rows] = rng.random(len(rows)).astype(np.float32)
    cols, table = P.columns_of(p, 3000, True)
    assert not table and P.spread_of(p).own_share() > P.MAX_OWN_SHARE
    for k, v in oracle.items():
        _same_bits(cols[P.KEYS[k]], v)


def test_entries_whose_hashes_collide_stay_apart(one_shot, monkeypatch):
    monkeypatch.setattr(P, "_MIX", np.uint64(0))  # every entry hashes alike: only the comparison tells them apart
    p, oracle = _written(np.random.default_rng(4), 2000)
    df, want, _ = _frame(p, oracle, 2000)
    for c in want.columns[1:]:
        _same_bits(P.values(df, c), want[c].to_numpy())
    P.release(df)


def test_frames_of_two_tables_put_together(one_shot):
    rng = np.random.default_rng(5)
    (pa, oa), (pb, ob) = _written(rng, 3000), _written(rng, 2000)
    (a, wa, _), (b, wb, _) = _frame(pa, oa, 3000), _frame(pb, ob, 2000)
    both = C.concat_frames([a, b])
    want = pd.concat([wa, wb], ignore_index=True)
    order = rng.permutation(len(both))
    for c in want.columns[1:]:
        _same_bits(P.values(both, c), want[c].to_numpy())
        _same_bits(P.values(both.take(order), c), want[c].to_numpy()[order])
    P.release(both)


def _report_cases():
    cases = [SHARED / "tpu" / "v6e-4_jax_inference.xplane.pb", FIXTURES / "parallel" / "moe_a",
             FIXTURES / "collectives" / "mesh2x8", FIXTURES / "serving" / "decode_gqa",
             FIXTURES / "kernels" / "te_attention" / "kernels.xplane.pb", FIXTURES / "cpu" / "async_dp8"]
    return [pytest.param(p, id=p.name if p.suffix else p.parent.name + "_" + p.name) for p in cases]


@pytest.mark.parametrize("path", _report_cases())
def test_reports_equal_with_predictions_per_identity(path, monkeypatch):
    """The report of a tracekit process (predictions kept per identity) equals a library caller's (the columns
    themselves), the table was used, and it was let go with the host's view."""
    if not path.exists():
        shared_missing(f"{path.parent.name}/{path.name}")
    from tracekit import pipeline
    library = pipeline.analyze(path).to_json()
    made = []
    register = P.register
    monkeypatch.setattr(P, "register", lambda *a: made.append(register(*a)) or made[-1])
    monkeypatch.setattr(threads, "_one_shot", True)
    monkeypatch.setattr(P, "MIN_ROWS", 1)  # (these traces are short: a table anyway)
    assert pipeline.analyze(path).to_json() == library
    kept = [f for f in made if P.CODE in f.columns]
    assert kept
    with pytest.raises(LookupError):  # released with the host's view
        P.values(kept[0], "roofline_ps")
