"""The column helpers the hot path leans on, checked against the plain pandas/NumPy way of doing the same thing."""
import numpy as np
import pandas as pd
import pytest

from conftest import shared_missing
from tracekit import columns as C
from tracekit import grouping as G
from tracekit import threads
from tracekit.ingest.order import frame_order as _order


def _frame(rng, n, sort):
    d = rng.integers(0, 3, n)
    t = rng.integers(0, 50, n)
    if sort:
        o = np.lexsort((t, d))
        d, t = d[o], t[o]
    if sort == "nearly":  # a few starts moved (a TPU's device clock reorders a few op rows)
        at = rng.integers(0, n, max(1, n // 40))
        t[at] = rng.integers(0, 50, len(at))
    return pd.DataFrame({"host": pd.Categorical(["h"] * n),
                         "device": pd.Categorical.from_codes(d, ["TPU:0", "TPU:1", "TPU:10"]),
                         "start_ps": t, "x": np.arange(n)})


def _reference(frames):
    cat = pd.concat([f.astype({"device": str, "host": str}) for f in frames], ignore_index=True)
    return np.lexsort((cat["start_ps"].to_numpy(), cat["device"].to_numpy().astype(str),
                       cat["host"].to_numpy().astype(str)))


@pytest.mark.parametrize("first_sorted", [True, False, "nearly"])
def test_order_equals_a_stable_sort_of_the_concatenation(first_sorted):
    rng = np.random.default_rng(7)
    for _ in range(40):
        frames = [_frame(rng, 200, first_sorted), _frame(rng, 30, False), _frame(rng, 5, False)]
        o = _order(frames)
        assert o is not None and (o == _reference(frames)).all()
    for _ in range(40):  # one frame, nearly in order
        frames = [_frame(rng, 300, "nearly")]
        o, want = _order(frames), _reference(frames)
        assert (o == want).all() if o is not None else (want == np.arange(300)).all()


def test_order_with_hosts_and_missing_devices_equals_a_stable_sort():
    """Several hosts (ranked before devices, by name) and devices a row lacks (ranked with the first name)."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        frames = []
        for n in (120, 40, 7):
            f = _frame(rng, n, False)
            hosts = np.array(["b", "a", "c10", "c9"])[rng.integers(0, 4, n)]
            codes = f["device"].array.codes.copy()
            codes[rng.random(n) < 0.1] = -1
            frames.append(f.assign(host=pd.Categorical(hosts),
                                   device=pd.Categorical.from_codes(codes, ["TPU:0", "TPU:1", "TPU:10"])))
        got = _order(frames)
        cat = pd.concat(frames, ignore_index=True)
        dev = cat["device"].astype(str).where(cat["device"].notna(), "TPU:0").to_numpy().astype(str)
        want = np.lexsort((cat["start_ps"].to_numpy(), dev, cat["host"].astype(str).to_numpy().astype(str)))
        assert got is not None and (got == want).all()


def test_order_none_when_sorted_and_concat_applies_it():
    rng = np.random.default_rng(3)
    f = _frame(rng, 100, True)
    assert _order([f]) is None
    frames = [f, _frame(rng, 20, False)]
    out = C.concat_frames(frames, order=_order(frames))
    ref = pd.concat(frames, ignore_index=True).iloc[_reference(frames)].reset_index(drop=True)
    assert out["x"].tolist() == ref["x"].tolist()
    assert out["device"].astype(str).tolist() == ref["device"].astype(str).tolist()
    assert isinstance(out["device"].dtype, pd.CategoricalDtype)


def test_dense_and_hashed_factorize_agree():
    rng = np.random.default_rng(0)
    key = rng.integers(0, 5000, 100_000)
    inv, first = G._factorize(key, 5000)  # dense table
    inv2, first2 = G._factorize(key, 1 << 40)  # hash path
    assert (inv == inv2).all() and (first == first2).all()
    assert (key[first][inv] == key).all()  # every row maps to a group holding its key
    assert (np.diff(first) > 0).all()  # groups in first-seen order


@pytest.mark.parametrize("chunk", [1, 5, 1 << 16])
def test_gather_of_narrow_indices_in_chunks(monkeypatch, chunk):
    monkeypatch.setattr(C, "_TAKE_CHUNK", chunk)
    rng = np.random.default_rng(4)
    a = rng.random(50)
    for dt in (np.int32, np.uint16, np.int64):
        idx = rng.integers(0, 50, 1003).astype(dt)
        got = C.gather(a, idx)
        assert got.dtype == a.dtype and np.array_equal(got, a[idx])


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_first_rows_in_chunks_equal_numpy(monkeypatch, chunk):
    """Short runs are scattered a chunk at a time, the last chunk first: the first row of each key still wins."""
    monkeypatch.setattr(G, "_CHUNK", chunk)
    rng = np.random.default_rng(2)
    for n in (1, 2, 50, 1001):
        key = rng.integers(0, 40, n).astype(np.int32)
        values, first = np.unique(key, return_index=True)
        want = np.full(40, n, np.int64)
        want[values] = first
        assert np.array_equal(G._first_rows(key, 40), want)
        inv, _ = G._factorize(key, 40)
        assert inv.dtype == np.int32 and (key[G._factorize(key, 40)[1]][inv] == key).all()


def test_runs_groups_rows_sorted_or_not():
    rng = np.random.default_rng(1)
    for codes in (np.repeat([2, 0, 1], [5, 3, 4]), rng.integers(0, 4, 2000)):
        got = G.runs(codes)
        assert sum(len(np.arange(len(codes))[rows]) for _, rows in got) == len(codes)
        for code, rows in got:
            assert (codes[rows] == code).all()
    assert all(isinstance(r, slice) for _, r in G.runs(np.repeat([2, 0, 1], [5, 3, 4])))


def test_codes_of_run_length_path_matches_factorize():
    v = pd.Series(np.repeat(np.array([5, 3, 5, 9], np.uint64), [1000, 2000, 10, 500]))
    codes, uniq = G.codes_of(v)
    ref, ref_u = pd.factorize(v)
    assert (codes == ref).all() and uniq == list(ref_u)


@pytest.mark.parametrize("n", [5, C.SMALL_ROWS + 1])
def test_with_columns_shares_arrays_and_leaves_the_input_alone(n, monkeypatch):
    """Above SMALL_ROWS the new frame shares the new arrays; at or below it, pandas' assign copies them and gives
    the same frame (columns, order, dtypes, values, index) as the sharing path; the input is left alone."""
    df = pd.DataFrame({"a": np.arange(n), "b": np.ones(n), "k": pd.Categorical(["x"] * n)}, index=np.arange(n) + 3)
    new = np.arange(n) * 2.0
    add = {"b": new, "c": np.zeros(n), "s": "text", "i": 7, "k2": pd.Series(pd.Categorical(["y"] * n), index=df.index)}
    out = C.with_columns(df, add)
    assert list(out.columns) == ["a", "b", "k", "c", "s", "i", "k2"] and list(df.columns) == ["a", "b", "k"]
    assert np.shares_memory(out["b"].to_numpy(), new) == (n > C.SMALL_ROWS)
    assert df["b"].tolist() == [1.0] * n
    monkeypatch.setattr(C, "SMALL_ROWS", -1)
    shared = C.with_columns(df, add)
    pd.testing.assert_frame_equal(out, shared, check_exact=True)
    assert list(out.dtypes) == list(shared.dtypes)
    dropped = C.without_columns(out, ["b", "zz", "s"])
    assert list(dropped.columns) == ["a", "k", "c", "i", "k2"] and "b" in out.columns
    assert np.shares_memory(dropped["c"].to_numpy(), out["c"].to_numpy())


def test_allocator_tuning_is_opt_out_and_changes_no_result(tmp_path):
    """The CLI's glibc tuning (tracekit/run/alloc.py) takes effect on glibc Linux, is off with
    TRACEKIT_MALLOC_TUNING=0, and the report is byte-identical either way."""
    import os
    import platform
    import subprocess
    import sys
    from pathlib import Path
    probe = "from tracekit.run import alloc; print(alloc.tune())"
    env = dict(os.environ)
    on = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env).stdout.strip()
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert on == "True"
    env["TRACEKIT_MALLOC_TUNING"] = "0"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env).stdout.strip() == "False"
    trace = Path(__file__).resolve().parents[1] / "fixtures/cpu/allreduce_exposed/plugins/profile/run1/cpu.xplane.pb"
    outs = []
    for flag in ("1", "0"):
        out = tmp_path / f"r{flag}.json"
        env["TRACEKIT_MALLOC_TUNING"] = flag
        r = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(trace), "-o", str(out)],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
        assert r.returncode in (0, 1), r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_top_rows_equals_a_stable_descending_sort():
    from tracekit.analysis.rules import top_rows
    rng = np.random.default_rng(5)
    for n, k in ((1000, 10), (1000, 400), (50, 50), (7, 20), (0, 3)):
        s = rng.integers(0, 20, n).astype(float)  # many ties
        ref = np.argsort(-s, kind="stable")[:k]
        assert (top_rows(s, k) == ref).all()


def test_step_cut_points_equal_np_unique():
    from tracekit.analysis.intervals import cut_points
    rng = np.random.default_rng(2)
    s0 = np.sort(rng.integers(0, 1000, 50))
    disjoint_ends = np.r_[s0[1:], 1200]  # steps end where the next starts: shared cut points
    for s1 in (disjoint_ends, s0 + rng.integers(0, 300, 50)):  # disjoint, then overlapping (the sort path)
        assert (cut_points(s0, s1) == np.unique(np.r_[s0, s1])).all()


def test_memory_mapped_load_equals_read_load(monkeypatch):
    """Large local traces are decoded from a read-only memory map: the frames equal those of a plain read."""
    from pathlib import Path

    from tracekit.ingest import paths as loader
    from tracekit.ingest import wire
    from tracekit.ingest.trace import load
    if not wire.HAVE_C:
        pytest.skip("the memory map path needs the C decoder")
    trace = Path(__file__).resolve().parents[1] / "fixtures/cpu/sharded8/plugins/profile/run1/cpu.xplane.pb"
    used = []
    real = loader._mapped
    def spy(p, m):
        out = real(p, m)
        used.append(out is not None)
        return out
    monkeypatch.setattr(loader, "_mapped", spy)
    monkeypatch.setattr(loader, "MMAP_MIN_BYTES", 0)
    mapped = load(trace)
    monkeypatch.setattr(loader, "MMAP_MIN_BYTES", 1 << 62)
    read = load(trace)
    assert used == [True, False] and len(mapped.ops) > 0
    pd.testing.assert_frame_equal(mapped.ops, read.ops)
    pd.testing.assert_frame_equal(mapped.steps, read.steps)


def test_import_tracekit_is_light_and_load_resolves_on_use():
    """``import tracekit`` imports neither pandas nor jax; ``tracekit.load`` / ``Trace`` still work."""
    import subprocess
    import sys
    code = ("import sys, tracekit; assert 'pandas' not in sys.modules and 'jax' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith(('pandas', 'jax'))); "
            "from tracekit import Trace, load; assert callable(load) and Trace.__name__ == 'Trace'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr


# ------------------------------------------------------------------------------ columns stored once (memory)
def test_constant_columns_read_the_same_values(monkeypatch):
    n = C.CONSTANT_MIN_ROWS
    df = pd.DataFrame({"varies": np.arange(n), "nan": np.full(n, np.nan), "minus_one": np.full(n, -1),
                       "flag": np.zeros(n, bool), "late": np.r_[np.zeros(n - 1), 1.0],
                       "text": pd.Categorical(["a"] * n),
                       "second": pd.Categorical.from_codes(np.ones(n, np.int8), ["a", "b"]),
                       "words": pd.Categorical.from_codes(np.arange(n) % 2, ["a", "b"])})

    def stored_once(frame):
        return {c for c in frame.columns
                if (frame[c].array.codes if isinstance(frame[c].dtype, pd.CategoricalDtype)
                    else frame[c].to_numpy()).strides == (0,)}
    assert C.constant_columns(df) is df  # a library caller's frames: as they are, writable
    monkeypatch.setattr(threads, "_one_shot", True)  # a tracekit process
    out = C.constant_columns(df)
    if not C._COPY_ON_WRITE:
        assert out is df
        return
    # "late" differs only in its last row; a categorical with one code on every row keeps its categories
    assert stored_once(out) == {"nan", "minus_one", "flag", "text", "second"}
    pd.testing.assert_frame_equal(out, df)
    assert list(out["second"].cat.categories) == ["a", "b"] and out["second"].iloc[-1] == "b"
    assert stored_once(C.constant_columns(df.head(n - 1))) == set()  # short frames are left as they are


def test_a_library_callers_frames_stay_writable():
    """Frames handed to a library caller hold no read-only column (commands store constant columns once)."""
    from tracekit import pipeline
    from tracekit.ingest.trace import load
    from conftest import cpu_fixture
    tr = load(cpu_fixture("train_step"))
    for df in (tr.ops, pipeline.with_roofline(tr)):
        for c in df.columns:
            df.loc[0, c] = df[c].iloc[1]  # raises on a read-only column


def test_one_value():
    assert C.one_value(np.array([])) is None
    assert np.isnan(C.one_value(np.full(5000, np.nan)))
    assert C.one_value(np.r_[np.full(5000, np.nan), 1.0]) is None
    assert C.one_value(np.full(9000, 3)) == 3
    assert C.one_value(np.r_[np.full(9000, 3), 4]) is None


def _report_cases():
    from conftest import FIXTURES, SHARED
    cases = [FIXTURES / "cpu" / "train_step", FIXTURES / "collectives" / "mesh4x4",
             SHARED / "tpu" / "v6e-4_jax_inference.xplane.pb", SHARED / "gpu" / "mi300x8_jax_conv3d.xplane.pb"]
    return [pytest.param(p, id=p.name) for p in cases]


@pytest.mark.parametrize("path", _report_cases())
def test_reports_do_not_depend_on_how_columns_are_stored(path, monkeypatch):
    """The report with every constant column of every frame stored once (however short the frame) equals the
    report with every column stored per row: the storage saves memory, never changes a verdict."""
    if not path.exists():
        shared_missing(f"{path.parent.name}/{path.name}")  # a third-party trace: skipped, or failed in CI
    from tracekit import pipeline
    per_row = pipeline.analyze(path).to_json()
    monkeypatch.setattr(threads, "_one_shot", True)  # a tracekit process
    monkeypatch.setattr(C, "CONSTANT_MIN_ROWS", 1)
    assert pipeline.analyze(path).to_json() == per_row


@pytest.mark.parametrize("sort", [True, False])
def test_row_parts_equal_pandas_groupby(sort):
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 500):
        df = _frame(rng, n, sort)
        got = {k: np.arange(n)[v] if isinstance(v, slice) else v for k, v in G.row_parts(df, ["host", "device"]).items()}
        want = {(str(h), str(d)): np.sort(np.asarray(ix)) for (h, d), ix in
                df.groupby(["host", "device"], observed=True).indices.items()}
        assert got.keys() == want.keys()
        for k in want:
            assert np.array_equal(got[k], want[k])
        if sort and n:
            assert all(isinstance(v, slice) for v in G.row_parts(df, ["host", "device"]).values())


@pytest.mark.parametrize("sort", [True, False])
def test_rows_by_text_equal_pandas_groupby_of_kept_rows(sort):
    rng = np.random.default_rng(4)
    for n in (0, 1, 9, 600):
        df = _frame(rng, n, sort)
        keep = rng.random(n) < 0.4
        got = G.rows_by_text(df, ["host", "device"], keep)
        kept = df[keep]
        want = {(str(h), str(d)): np.sort(np.flatnonzero(keep)[np.asarray(ix)]) for (h, d), ix in
                kept.groupby(["host", "device"], observed=True).indices.items()}
        assert got.keys() == want.keys()
        for k in want:
            assert np.array_equal(got[k], want[k])


def test_last_window_at_or_before_equals_searchsorted():
    from tracekit.ingest.order import last_at_or_before
    rng = np.random.default_rng(11)
    for n, m in ((0, 3), (5, 0), (2000, 1), (5000, 40), (5000, 3000)):
        ws = np.sort(rng.integers(0, 1000, m))
        tt = np.sort(np.r_[rng.integers(-50, 1050, n), ws[: n // 10]])[:n]  # ties with window starts
        want = np.searchsorted(ws, tt, side="right") - 1
        assert np.array_equal(last_at_or_before(ws, tt), want)
        assert np.array_equal(last_at_or_before(ws, tt[::-1].copy()), want[::-1])  # unsorted times


def test_clock_fit_band_counts_equal_searchsorted():
    """The device-clock fit's band counts (a merge of two sorted runs) equal ``searchsorted(r, q, "right")``,
    ties between ``r`` and ``q`` included."""
    from tracekit.ingest import devclock
    rng = np.random.default_rng(12)
    for n in (0, 1, 7, 5000):
        r = np.sort(rng.integers(0, 300, n).astype(np.float64))
        for tol in (0.0, 1.0, 25.0, 1e9):
            q = r + tol
            assert np.array_equal(devclock._counts_up_to(r, q), np.searchsorted(r, q, "right"))


def test_unique_equals_np_unique():
    """grouping.unique (one sort) gives np.unique's values and dtype: signed, unsigned, bool, empty, one value,
    round picosecond times, and floats with NaN (handed to np.unique)."""
    rng = np.random.default_rng(13)
    cases = [rng.integers(-5, 5, 1000), np.zeros(0, np.int64), np.array([7]), rng.integers(0, 2, 99).astype(bool),
             rng.integers(0, 1 << 60, 5000).astype(np.uint64), rng.integers(0, 10**6, 20000) * 1_000_000,
             np.array([1.0, np.nan, 2.0, np.nan])]
    for a in cases:
        got, want = G.unique(a), np.unique(a)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=a.dtype.kind == "f")


def test_distinct_values_equal_np_unique():
    rng = np.random.default_rng(5)
    for a in (np.array([], np.uint64), np.array([7], np.uint64), np.repeat(rng.integers(0, 2**63, 9, dtype=np.uint64), 1000),
              rng.integers(0, 50, 3000), np.broadcast_to(np.array([3.5]), (100,))):
        assert np.array_equal(G.distinct_values(a), np.unique(a))


def test_group_sums_equal_one_bincount_bit_for_bit(monkeypatch):
    """op stats' chunked group sums give exactly the sums of one np.bincount over the NaN-free values (same
    order of additions), and the count of rows with a value; chunk edges fall inside groups."""
    from tracekit.analysis import opstats
    monkeypatch.setattr(opstats, "SUM_CHUNK", 1000)
    rng = np.random.default_rng(8)
    for n, groups in ((0, 3), (999, 1), (5003, 40)):
        gi = rng.integers(0, groups, n)
        v = rng.normal(0, 1e9, n) * rng.random(n)
        v[rng.random(n) < 0.3] = np.nan
        for positive in (False, True):
            w = np.where(np.isnan(v), 0.0, np.maximum(v, 0.0) if positive else v)
            tot, cnt = opstats.group_sums(gi, v, groups, positive=positive)
            assert np.array_equal(tot, np.bincount(gi, weights=w, minlength=groups))
            assert np.array_equal(cnt, np.bincount(gi, weights=~np.isnan(v), minlength=groups).astype(np.int64))
            given = opstats.group_sums(gi, v, groups, positive=positive, counts=np.bincount(gi, minlength=groups))
            assert np.array_equal(given[0], tot) and np.array_equal(given[1], cnt)  # the caller's row counts
        ints = rng.integers(0, 10**15, n)  # int64 times: cast to float as bincount casts its weights
        assert np.array_equal(opstats.group_sums(gi, ints, groups)[0], np.bincount(gi, weights=ints, minlength=groups))
        const = np.broadcast_to(np.array([2.5]), (n,))  # a column stored once (a zero-stride view)
        assert np.array_equal(opstats.group_sums(gi, const, groups)[0], np.bincount(gi, weights=np.full(n, 2.5),
                                                                                     minlength=groups))


def test_without_columns_shares_the_rest():
    df = pd.DataFrame({"a": np.arange(5), "b": np.ones(5), "c": np.zeros(5)})
    out = C.without_columns(df, ["b", "missing"])
    assert list(out.columns) == ["a", "c"] and list(df.columns) == ["a", "b", "c"]
    assert np.shares_memory(out["a"].to_numpy(), df["a"].to_numpy())


def _wide(rng, n, k=8):
    return pd.DataFrame({"host": pd.Categorical(["h"] * n),
                         "device": pd.Categorical.from_codes(rng.integers(0, 3, n), ["TPU:0", "TPU:1", "TPU:10"]),
                         "start_ps": rng.integers(0, 1 << 40, n),
                         **{f"c{i}": rng.random(n) for i in range(k)}}, copy=False)  # (a block per column,
    # as the loader's frames: a consolidated block is freed only once every column of it has gone)


def _peak_above_start(make, fn):
    """(``fn(make())``, bytes it allocated at its peak above what was alive when it began). The inputs are made
    while tracing, so that what ``fn`` frees of them counts."""
    import tracemalloc
    tracemalloc.start()
    try:
        inputs = make()
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn(inputs)
        del inputs
        return out, tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_concat_frames_consume_lets_the_inputs_go_column_by_column():
    make = lambda: [_wide(np.random.default_rng(11), 200_000), _wide(np.random.default_rng(12), 50_000)]
    frames = make()
    order = _order(frames)
    ref = pd.concat(frames, ignore_index=True).iloc[order].reset_index(drop=True)
    plain, plain_peak = _peak_above_start(make, lambda f: C.concat_frames(f, order=order))
    held = []

    def eat(f):
        held.append(f)  # the caller's list, to see it emptied
        return C.concat_frames(f, order=order, consume=True)
    eaten, eaten_peak = _peak_above_start(make, eat)
    assert held == [[]]
    for out in (plain, eaten):
        pd.testing.assert_frame_equal(out.astype({"host": str, "device": str}),
                                      ref.astype({"host": str, "device": str}))
    # the output (10 columns of 250 k rows) is made either way; consumed, the inputs' columns go as it is made
    out_bytes = sum(eaten[c].to_numpy().nbytes for c in eaten.columns if c.startswith(("c", "start")))
    assert plain_peak > out_bytes
    assert eaten_peak < 0.4 * plain_peak


def test_accumulator_frame_lets_its_chunks_go():
    from tracekit import schema
    from tracekit.ingest.events import Acc, Cat

    def filled():
        rng = np.random.default_rng(5)
        acc = Acc()
        for n in (120_000, 80_000):
            acc.add(host="h", device=Cat(rng.integers(0, 2, n).astype(np.int32), ["TPU:0", "TPU:1"]),
                    start_ps=rng.integers(0, 1 << 40, n), duration_ps=rng.integers(0, 1 << 20, n),
                    run_id=rng.integers(-1, 9, n), program_id=rng.integers(0, 9, n).astype(np.uint64),
                    trace_flops=rng.random(n), trace_bytes=rng.random(n), trace_model_flops=rng.random(n))
        return acc
    acc = filled()
    want = {k: np.concatenate([c[k] for c in acc.chunks]) for k in ("start_ps", "duration_ps", "run_id", "trace_flops")}
    dev = [["TPU:0", "TPU:1"][i] for c in acc.chunks for i in c["device"].codes]
    f, peak = _peak_above_start(filled, lambda a: a.frame(schema.OPS))
    for k, v in want.items():
        assert (f[k].to_numpy() == v).all()
    assert f["device"].astype(str).tolist() == dev
    assert acc.frame(schema.OPS) is not None and acc.chunks == []  # (emptied)
    kept = []

    def held(a):
        kept.extend(dict(c) for c in a.chunks)  # the caller holds the chunks: nothing can go
        return a.frame(schema.OPS)
    _, held_peak = _peak_above_start(filled, held)
    assert peak < 0.5 * held_peak


def test_narrow_int_narrows_only_what_fits():
    """int32 when every value fits; a value past 2^31 keeps the whole column int64 (a cast would wrap it); a
    constant held once (stride 0) stays held once."""
    small = C.narrow_int(np.array([-1, 0, 2**31 - 1], np.int64))
    assert small.dtype == np.int32 and small.tolist() == [-1, 0, 2**31 - 1]
    wide = C.narrow_int(np.array([-1, 2**31], np.int64))
    assert wide.dtype == np.int64 and wide.tolist() == [-1, 2**31]
    assert C.narrow_int(np.array([-(2**31) - 1, 0], np.int64)).dtype == np.int64
    const = C.narrow_int(np.broadcast_to(np.array([-1], np.int64), (1000,)))
    assert const.dtype == np.int32 and const.strides == (0,) and (const == -1).all()
    big_const = np.broadcast_to(np.array([2**40], np.int64), (10,))
    assert C.narrow_int(big_const) is big_const
    f = np.array([1.5])
    assert C.narrow_int(f) is f


@pytest.mark.parametrize("chunk", [1, 7, 1 << 18])
@pytest.mark.parametrize("wanted", [0, 1, 8, 9, 200])
def test_member_mask_equals_isin(monkeypatch, chunk, wanted):
    monkeypatch.setattr(C, "_CHUNK", chunk)
    rng = np.random.default_rng(wanted)
    key = rng.integers(-(1 << 50), 1 << 50, 2001)
    values = np.r_[rng.choice(key, wanted // 2), rng.integers(-(1 << 50), 1 << 50, wanted - wanted // 2)]
    for k in (key, key.astype(np.int32), np.sort(key)):
        v = values.astype(k.dtype)
        assert np.array_equal(C.member_mask(k, v), np.isin(k, v))


@pytest.mark.parametrize("n", [0, 1, 500])
def test_per_value_and_per_pair_equal_the_row_by_row_result(n):
    """grouping.per_value / per_pair give what the function gives row by row, also for None and repeated values."""
    rng = np.random.default_rng(n)
    words = np.array(["all-reduce-start", "all-reduce-done.1", "fusion", "", None, "copy-done"], object)
    a, b = words[rng.integers(0, len(words), n)], words[rng.integers(0, 3, n)]
    flag = G.per_value(lambda v: isinstance(v, str) and v.endswith("done.1"), a, bool)
    assert flag.dtype == bool and flag.tolist() == [isinstance(v, str) and v.endswith("done.1") for v in a]
    pair = G.per_pair(lambda x, y: f"{x}/{y}", a, b)
    assert pair.dtype == object and pair.tolist() == [f"{x}/{y}" for x, y in zip(a, b)]


def test_placeholder_columns_are_held_once_in_a_tracekit_process(monkeypatch):
    """The columns the loader fills before it knows them (run ids, steps, self times) and the columns no row of a
    trace has are one value stored once in a tracekit process, and stay so through the loader's concatenation and
    sort; a library caller's frames get writable per-row columns. Either way every row reads the same value."""
    from tracekit import schema
    n = C.CONSTANT_MIN_ROWS
    part = pd.DataFrame({"start_ps": np.arange(n, dtype=np.int64)[::-1].copy(),
                         "duration_ps": np.arange(n, dtype=np.int64) % 7})
    filled = ("run_id", "step", "self_ps", "trace_flops", "program_id", "is_async")
    lib = schema.conform(part, schema.OPS)
    assert not any(C.held_once(lib[c].to_numpy()) for c in filled)
    monkeypatch.setattr(threads, "_one_shot", True)  # a tracekit process
    one = schema.conform(part, schema.OPS)
    if not C._COPY_ON_WRITE:
        return  # (pandas 2: nothing is stored once)
    assert all(C.held_once(one[c].to_numpy()) for c in filled)
    pd.testing.assert_frame_equal(one, lib)
    # concatenated in a new order: still held once where every frame holds the same value; made per row where not
    other = C.with_columns(schema.conform(part, schema.OPS), {"step": C.filled(n, 5, np.int64)})
    order = np.argsort(np.r_[one["start_ps"].to_numpy(), other["start_ps"].to_numpy()], kind="stable")
    ref = pd.concat([lib, other.astype({"step": np.int64})], ignore_index=True).iloc[order].reset_index(drop=True)
    out = C.concat_frames([one, other], order=order)
    assert all(C.held_once(out[c].to_numpy()) for c in filled if c != "step")
    assert not C.held_once(out["step"].to_numpy())
    pd.testing.assert_frame_equal(out.astype({"host": str, "device": str}), ref.astype({"host": str, "device": str}),
                                  check_categorical=False)
    some = order[::2]  # an order that keeps half of the rows: a held-once column has as many
    part_out = C.concat_frames([one, other], order=some)
    assert len(part_out["run_id"]) == len(some) and C.held_once(part_out["run_id"].to_numpy())
    pd.testing.assert_frame_equal(part_out.astype({"host": str, "device": str}),
                                  ref.iloc[::2].reset_index(drop=True).astype({"host": str, "device": str}),
                                  check_categorical=False)


def _line_with_stats(rng, n: int, layout: str):
    """A decoded line of ``n`` events whose stat 7 is held once by every event ("every"), by some ("some"), twice
    by some ("twice"), or in mixed kinds (int64, double, uint64 bits, numeric and other text, a ref); stat 9 is
    noise between them."""
    from tracekit.ingest.wire import KIND_BYTES, KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64, LineData
    ev, sid, kind, ival, dval, strs = [], [], [], [], [], []
    for e in range(n):
        if rng.random() < 0.5:  # noise stat first
            ev.append(e), sid.append(9), kind.append(KIND_INT64), ival.append(-1), dval.append(np.nan)
        holds = {"every": 1, "some": int(rng.random() < 0.6), "twice": int(rng.integers(0, 3)), "mixed": 1}[layout]
        for _ in range(holds):
            k = KIND_INT64 if layout != "mixed" else int(rng.choice(
                [KIND_INT64, KIND_DOUBLE, KIND_UINT64, KIND_STR, KIND_BYTES, KIND_REF]))
            v = int(rng.integers(-10**12, 10**12))
            if k in (KIND_STR, KIND_BYTES):
                text = rng.choice([str(v), "x1", f"{v}.5", "nan"])
                strs.append(text.encode() if k == KIND_BYTES else text)
                ev.append(e), sid.append(7), kind.append(k), ival.append(len(strs) - 1), dval.append(np.nan)
            elif k == KIND_DOUBLE:
                ev.append(e), sid.append(7), kind.append(k), ival.append(0), dval.append(v + rng.choice([0.0, 0.25]))
            else:
                ev.append(e), sid.append(7), kind.append(k), ival.append(abs(v) if k == KIND_UINT64 else v)
                dval.append(np.nan)
    return LineData(id=1, name="l", display_name="l", timestamp_ns=0, duration_ps=0,
                    metadata_id=np.zeros(n, np.int64), offset_ps=np.zeros(n, np.int64),
                    event_duration_ps=np.zeros(n, np.int64), stat_event=np.array(ev, np.int32),
                    stat_id=np.array(sid, np.int64), stat_kind=np.array(kind, np.int8),
                    stat_int=np.array(ival, np.int64), stat_double=np.array(dval, np.float64), stat_str=strs)


def test_stat_readers_equal_entry_by_entry_oracle():
    """events.stat_ints / stat_floats (whose every-event-once lines skip the scatter) give what reading the
    entries one by one gives: the last entry of an event wins, numbers stored as doubles or text count, other
    text and refs do not (ints), NaN / has=False where absent."""
    from tracekit.ingest import events
    from tracekit.ingest.wire import KIND_BYTES, KIND_DOUBLE, KIND_REF, KIND_STR, KIND_UINT64
    rng = np.random.default_rng(5)

    def as_float(line, k):
        kind, iv = int(line.stat_kind[k]), int(line.stat_int[k])
        if kind == KIND_DOUBLE:
            return float(line.stat_double[k])
        if kind in (KIND_STR, KIND_BYTES):
            try:
                return float(line.stat_str[iv])
            except ValueError:
                return np.nan
        if kind == KIND_REF:
            return np.nan  # (a name is not a number)
        return float(np.uint64(iv)) if kind == KIND_UINT64 else float(iv)

    def as_int(line, k):  # None: the entry does not count
        kind, iv = int(line.stat_kind[k]), int(line.stat_int[k])
        if kind == KIND_DOUBLE:
            d = float(line.stat_double[k])
            return int(d) if np.isfinite(d) and abs(d) < 2.0**63 else None
        if kind in (KIND_STR, KIND_BYTES):
            text = line.stat_str[iv]
            try:
                return int(text)
            except ValueError:
                try:
                    f = float(text)
                except ValueError:
                    return None
                return int(f) if np.isfinite(f) and -(2**63) <= int(f) < 2**63 else None
        return iv  # int64, uint64 bits, ref id: the integer as stored

    # as many entries as events, the first and the last event's among them, yet one event twice and one without
    odd = _line_with_stats(rng, 4, "every")
    seven = np.flatnonzero(odd.stat_id == 7)
    odd.stat_event, odd.stat_id, odd.stat_kind, odd.stat_int, odd.stat_double = (
        np.array([0, 1, 1, 3], np.int32), *(a[seven] for a in (odd.stat_id, odd.stat_kind, odd.stat_int,
                                                                 odd.stat_double)))
    cases = [("odd", 4, odd)] + [(layout, n, _line_with_stats(rng, n, layout))
                                 for layout in ("every", "some", "twice", "mixed") for n in (0, 1, 2, 40)]
    for layout, n, line in cases:
        want_i, want_f = {}, {}
        for k in range(len(line.stat_id)):  # entry by entry, in order: the last one of an event wins
            if int(line.stat_id[k]) != 7:
                continue
            e = int(line.stat_event[k])
            want_f[e] = as_float(line, k)
            if (x := as_int(line, k)) is not None:
                want_i[e] = x
        has, val = events.stat_ints(line, 7)
        fl = events.stat_floats(line, 7)
        assert has.dtype == bool and val.dtype == np.int64 and fl.dtype == np.float64
        assert len(has) == len(val) == len(fl) == n
        for e in range(n):
            assert bool(has[e]) == (e in want_i) and int(val[e]) == want_i.get(e, 0), (layout, n, e)
            w = want_f.get(e, np.nan)
            assert (np.isnan(fl[e]) and np.isnan(w)) or fl[e] == w, (layout, n, e)


def test_with_copies_equals_concatenating_the_copies():
    """order.with_copies (the loader's async windows: copies of the -start rows, a few columns their own) gives
    what building the copies and concatenating them in (host, device, start) order gives: values, dtypes,
    categories and their order, codes' width; a column stored once comes out with its one value."""
    from tracekit.ingest.order import with_copies
    rng = np.random.default_rng(8)
    for n, m, hosts in ((1, 1, 1), (50, 0, 1), (300, 40, 1), (300, 200, 2), (5000, 900, 3)):
        host = pd.Categorical(rng.choice([f"h{i}" for i in range(hosts)], n))
        dev = pd.Categorical(rng.choice(["TPU:1", "TPU:0", "TPU:10"], n), categories=["TPU:10", "TPU:0", "TPU:1"])
        df = pd.DataFrame({"host": host, "device": dev, "line": pd.Categorical(["XLA Ops"] * n),
                           "op": pd.Categorical(rng.choice(["a", "b", "c-start"], n)),
                           "start_ps": rng.integers(0, 10**6, n).astype(np.int64),
                           "duration_ps": rng.integers(0, 10**4, n).astype(np.int64),
                           "flops": np.where(rng.random(n) < 0.3, np.nan, rng.random(n)),
                           "small": rng.integers(0, 100, n).astype(np.int32),
                           "is_async": np.zeros(n, bool), "note": pd.array(rng.choice(["x", "y"], n), dtype=object),
                           "step": C.filled(n, -1, np.int64)})
        df = df.sort_values(["host", "device", "start_ps"], kind="stable").reset_index(drop=True)
        rows = np.sort(rng.choice(n, m, replace=False)).astype(np.int64)
        own = {"duration_ps": rng.integers(0, 10**5, m).astype(np.int64), "is_async": np.ones(m, bool),
               "line": pd.Categorical.from_codes(np.zeros(m, np.int8), categories=["Async"])}
        copies = df.iloc[rows].reset_index(drop=True)
        for c, v in own.items():
            copies[c] = v
        want = C.concat_frames([df.copy(), copies], order=_order([df, copies]))
        got = with_copies([df.copy()], rows, own)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        for c in want.columns:
            if isinstance(want[c].dtype, pd.CategoricalDtype):
                assert list(got[c].cat.categories) == list(want[c].cat.categories), c
                assert got[c].array.codes.dtype == want[c].array.codes.dtype, c
        assert (got["step"] == -1).all()
        # pandas alone: the rows and copies as plain values, sorted by text host and device, then start (stable)
        plain = pd.concat([df.astype({c: object for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)}),
                           copies.astype({c: object for c in copies.columns
                                          if isinstance(copies[c].dtype, pd.CategoricalDtype)})], ignore_index=True)
        plain = plain.sort_values(["host", "device", "start_ps"], kind="stable").reset_index(drop=True)
        for c in plain.columns:
            a, b = got[c].astype(object).tolist(), plain[c].tolist()
            assert all(x == y or (x != x and y != y) for x, y in zip(a, b)) and len(a) == len(b), c
        assert list(got["line"].cat.categories) == ["XLA Ops"] + (["Async"] if m else [])  # first seen, then new


def test_sorted_group_numbers_equal_pandas_ngroup():
    """grouping.sorted_group_numbers: pandas' groupby(sort=True).ngroup() over integer and boolean keys."""
    rng = np.random.default_rng(21)
    for n in (0, 1, 2, 50, 3000):
        cols = {"op": rng.integers(0, 7, n).astype(np.int32), "a": rng.random(n) < 0.5,
                "g": rng.integers(-2, 3, n).astype(np.int64), "k": rng.integers(0, 4, n).astype(np.int64)}
        want = pd.DataFrame(cols).groupby(list(cols), sort=True).ngroup().to_numpy() if n else np.zeros(0, np.int64)
        got = G.sorted_group_numbers(*cols.values())
        assert np.array_equal(got, want) and got.dtype == np.int64


# ------------------------------------------------------------ a column's stored array, without the Series (oracle: pandas)
def _typed_frame() -> pd.DataFrame:
    n = 6
    return pd.DataFrame({
        "i64": np.arange(n, dtype=np.int64), "i32": np.arange(n, dtype=np.int32) - 3, "f32": np.linspace(0, 1, n,
                                                                                                        dtype=np.float32),
        "f64": [0.5, np.nan, np.inf, -1.0, 2.0, 3.25], "b": [True, False] * 3, "u64": np.arange(n, dtype=np.uint64),
        "obj": pd.Series([None, "a", 1, 2.5, "b", ("t",)], dtype=object), "text": ["x", "y", None, "z", "x", "y"],
        "cat": pd.Categorical(["p", "q", None, "p", "q", "p"]), "nullable": pd.array([1, None, 3, 4, 5, 6], "Int64"),
        "when": pd.date_range("2026-01-01", periods=n, freq="h"), 7: np.arange(n) * 2})


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if type(a) is not type(b) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype == object:  # (element by element: NaN equals NaN, types too)
            return all(type(x) is type(y) and (x is y or x == y or (x != x and y != y)) for x, y in zip(a, b))
        return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    return type(a) is type(b) and a.dtype == b.dtype and a.equals(b)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
@pytest.mark.parametrize("fast", [True, False])
def test_stored_and_column_numpy_give_what_the_series_gives(fast, monkeypatch):
    """stored(df, c) is df[c].to_numpy() for a NumPy column (read-only), df[c].array otherwise; column_numpy(df, c,
    dtype) is df[c].to_numpy(dtype): every dtype, with pandas' accessor and without it (the fallback)."""
    if not fast:
        monkeypatch.setattr(C, "_COLUMN_ARRAY", None)
    df = _typed_frame()
    for c in df.columns:
        s = df[c]
        want = s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array
        got = C.stored(df, c)
        assert _same(got, want), c
        if isinstance(got, np.ndarray) and ((fast and got.dtype.kind not in "Mm") or C._COPY_ON_WRITE):
            assert not got.flags.writeable, c  # (a view of the frame's block: never written through)
        for dtype in (None, np.int64, float, bool, object, np.uint64):
            try:
                want = s.to_numpy(dtype)
            except (TypeError, ValueError) as e:
                with pytest.raises(type(e)):
                    C.column_numpy(df, c, dtype)
                continue
            got = C.column_numpy(df, c, dtype)
            assert _same(got, want), (c, dtype)
            if C._COPY_ON_WRITE or not np.shares_memory(want, df[c].to_numpy()):  # (pandas 2 hands out its block)
                assert got.flags.writeable == want.flags.writeable, (c, dtype)
    with pytest.raises(KeyError):
        C.stored(df, "absent")
    with pytest.raises(KeyError):
        C.column_numpy(df, "absent")
    twice = pd.concat([df[["i64"]], df[["f64"]].rename(columns={"f64": "i64"})], axis=1)  # a name two columns share
    assert C.stored(twice, "i64").equals(twice["i64"])
    mapping = {"i64": df["i64"]}  # (any mapping of Series: its own to_numpy)
    assert _same(C.column_numpy(mapping, "i64", float), df["i64"].to_numpy(float))
    assert np.shares_memory(C.stored(df, "i64"), df["i64"].to_numpy())  # no copy


def test_codes_of_a_stored_array_is_the_series_own():
    df = _typed_frame()
    big = pd.DataFrame({"pid": np.repeat(np.arange(5, dtype=np.uint64), 400), "f": np.repeat([0.5, 1.5], 1000)})
    for frame in (df, big):
        for c in frame.columns:
            if c == "when":
                continue
            for compact in (False, True):
                try:
                    want = G.codes_of(frame[c], compact=compact)
                except TypeError:  # (values factorize cannot hash: a tuple is fine, a list is not)
                    continue
                got = G.codes_of(C.stored(frame, c), compact=compact)
                assert np.array_equal(got[0], want[0]) and got[0].dtype == want[0].dtype, (c, compact)
                assert [(type(v), v) for v in got[1]] == [(type(v), v) for v in want[1]], (c, compact)


def test_records_clean_every_dtype_as_the_series_iterates():
    from tracekit.report import envelope
    df = _typed_frame()
    want = [{c: envelope.clean(v) for c, v in zip(df.columns, row)} for row in
            zip(*([*s] for _, s in df.items()))]
    assert envelope.records(df) == want
    assert [[type(v) for v in r.values()] for r in envelope.records(df)] == [[type(v) for v in r.values()] for r in want]


@pytest.mark.parametrize("fast", [True, False])
def test_text_numpy_is_astype_str_to_numpy(fast, monkeypatch):
    """text_numpy(df, c) against pandas' df[c].astype(str).to_numpy(): categoricals of text, ints (with a missing
    value pandas pads the categories as floats: '1.0'), floats, bools, datetimes, empty and all-missing ones, and
    plain columns (pandas itself), same values and value types."""
    if not fast:
        monkeypatch.setattr(C, "_COLUMN_ARRAY", None)
    cases = {"text": pd.Categorical(["p", "q", None, "p"]), "ints_missing": pd.Categorical([1, 2, None, 1]),
             "ints": pd.Categorical([1, 2, 1, 3]), "floats": pd.Categorical([1.0, 2.5, np.nan, 2.5]),
             "no_missing": pd.Categorical(["a", "b", "a", "a"]), "bools": pd.Categorical([True, False, None, True]),
             "dates": pd.Categorical(pd.to_datetime(["2026-01-01", None, "2026-01-02", "2026-01-01"])),
             "unused_category": pd.Categorical(["a", "a", "a", "a"], categories=["z", "a"]),
             "objects": pd.Series(["a", None, 1, 2.5], dtype=object), "ints_plain": np.arange(4)}
    df = pd.DataFrame(cases)
    for c in [*df.columns, "empty", "all_missing"]:
        frame = df if c in df.columns else pd.DataFrame(
            {c: pd.Categorical([], categories=["a"]) if c == "empty" else pd.Categorical([None, None], categories=[])})
        want, got = frame[c].astype(str).to_numpy(), C.text_numpy(frame, c)
        assert got.dtype == want.dtype and len(got) == len(want), c
        assert all(type(x) is type(y) and (x == y or (x != x and y != y)) for x, y in zip(got, want)), c
    mapping = {"m": pd.Series(pd.Categorical(["a", "b"]))}  # (a mapping that is not a frame: pandas itself)
    assert list(C.text_numpy(mapping, "m")) == list(mapping["m"].astype(str).to_numpy())


def test_numbers_or_series_is_the_array_of_number_columns_and_the_series_of_the_rest():
    df = _typed_frame()
    for c in df.columns:
        got, s = C.numbers_or_series(df, c), df[c]
        if isinstance(s.dtype, np.dtype) and s.dtype.kind in "biuf":
            assert _same(got, s.to_numpy()) and not got.flags.writeable, c
        else:
            assert isinstance(got, pd.Series) and got.equals(s) and got.dtype == s.dtype, c
