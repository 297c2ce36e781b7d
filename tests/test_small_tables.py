"""The memory view's buffer tables and the per-device step statistics are computed on plain lists and arrays (a
pandas merge, group or sort costs milliseconds on tables of tens of rows). Each is checked here against the same
quantity written with pandas (merge, groupby, sort_values, quantile) as an independent oracle, on real traces (the
shared v6e trace: host offload, allocator events, heap-simulator traces) and on random tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import cpu_fixture, shared_trace

import tracekit
from tracekit.analysis import memory, stepstats
from tracekit.ingest import buffers as buf
from tracekit.model import roofline


def _traces():
    yield pytest.param(lambda: shared_trace("tpu/v6e-4_jax_inference.xplane.pb"), id="v6e")
    yield pytest.param(lambda: shared_trace("gpu/mi300x8_jax_conv3d.xplane.pb"), id="mi300x8")
    for case in ("train_step", "allreduce_exposed", "attention"):
        yield pytest.param(lambda case=case: cpu_fixture(case), id=case)


@pytest.fixture(scope="module", params=list(_traces()))
def loaded(request):
    tr = tracekit.load(request.param())
    return tr, buf.tables(tr.hlo_modules)


def _largest_buffers_by_pandas(t: buf.BufferTables) -> pd.DataFrame:
    al, bu = t.allocations, t.buffers
    cols = ["module", "program_id", "memory_space", "kind", "size_bytes", "instruction", "opcode", "shape",
            "source_file", "source_line", "parameter_number", "allocation", "from_host"]
    j = bu.merge(al[["module", "program_id", "allocation", "kind", "parameter_number", "memory_space"]],
                 on=["module", "program_id", "allocation"], how="inner")
    temp, other = j[j["kind"] == "temp"], j[j["kind"] != "temp"].copy()
    other["_p"] = other["opcode"] != "parameter"
    other = other.sort_values(["module", "program_id", "allocation", "_p", "size_bytes"],
                              ascending=[True, True, True, True, False]).drop_duplicates(
        ["module", "program_id", "allocation"])
    size = al.set_index(["module", "program_id", "allocation"])["size_bytes"]
    other["size_bytes"] = size.loc[list(zip(other["module"], other["program_id"], other["allocation"]))].to_numpy()
    out = pd.concat([temp, other.drop(columns="_p")], ignore_index=True)[cols]
    out = out[out["size_bytes"] > 0]
    foot = al.groupby(["module", "program_id"])["size_bytes"].sum()
    out = out.assign(_f=foot.loc[list(zip(out["module"], out["program_id"]))].to_numpy())
    return out.sort_values(["size_bytes", "_f", "module", "instruction"], ascending=[False, False, True, True],
                           kind="stable", ignore_index=True).drop(columns="_f")


def test_largest_buffers_equal_a_pandas_merge(loaded):
    _, t = loaded
    got, want = memory.largest_buffers(t), _largest_buffers_by_pandas(t)
    assert len(got) > 0
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_program_rows_and_offload_equal_pandas_selections(loaded):
    tr, t = loaded
    progs, _ = memory.programs(t, memory.aliases(tr.hlo_modules))
    assert len(progs) > 0
    for (mod, pid, space), row in progs.set_index(["module", "program_id", "memory_space"]).iterrows():
        al = t.allocations[(t.allocations["module"] == mod) & (t.allocations["program_id"] == pid)
                           & (t.allocations["memory_space"] == space)]
        by_kind = al.groupby("kind")["size_bytes"].sum()
        assert row["argument_bytes"] == by_kind.get("argument", 0) + by_kind.get("argument+output", 0)
        assert row["temp_bytes"] == by_kind.get("temp", 0)
        bu = t.buffers[(t.buffers["module"] == mod) & (t.buffers["program_id"] == pid)
                       & t.buffers["allocation"].isin(al["allocation"])]
        assert row["largest_buffer_bytes"] == (bu["size_bytes"].max() if len(bu) else 0)
    off = memory.offload(progs, t, 32 * 2**30)
    host = progs[(progs["memory_space"] == "host") & (progs["argument_bytes"] + progs["output_bytes"]
                                                      - progs["alias_bytes"] + progs["temp_bytes"] > 0)]
    assert off[["module", "program_id"]].values.tolist() == host[["module", "program_id"]].values.tolist()
    for r in off.itertuples():
        b = t.buffers[(t.buffers["module"] == r.module) & (t.buffers["program_id"] == r.program_id)]
        al = t.allocations[(t.allocations["module"] == r.module) & (t.allocations["program_id"] == r.program_id)]
        dev_temp = b[(b["color"] == 0) & b["allocation"].isin(al.loc[al["kind"] == "temp", "allocation"])]
        assert r.staging_bytes == int(dev_temp.loc[dev_temp["from_host"], "size_bytes"].sum())


def test_allocator_summary_equals_a_pandas_groupby(loaded):
    tr, _ = loaded
    ev = tr.memory_events
    if ev is None or not len(ev):
        pytest.skip("no allocator events in this trace")
    got, curves = memory.allocator_summary(ev)
    rows = []
    for (h, a), g in ev.groupby([ev["host"].astype(str), ev["allocator"].astype(str)], sort=True):
        g = g.sort_values("start_ps", kind="stable")
        g = g[g["bytes_in_use"].notna()]
        rows.append((h, a, len(g), int(g["start_ps"].iloc[0]), int(g["start_ps"].iloc[-1]),
                     float(g["bytes_in_use"].max()), float(g["bytes_in_use"].iloc[-1])))
    assert [tuple(r) for r in got[["host", "allocator", "events", "start_ps", "end_ps", "peak_in_trace_bytes",
                                   "last_bytes"]].itertuples(index=False)] == rows
    assert set(curves) == {(h, a) for h, a, *_ in rows}


def _step_stats_by_pandas(steps: pd.DataFrame, column: str) -> pd.DataFrame:
    st = stepstats.closed_steps(steps)
    g = st.assign(host=st["host"].astype(str), device=st["device"].astype(str)).groupby(["host", "device"])[column]
    return g.agg(steps="size", mean_ps="mean", median_ps="median", p90_ps=lambda s: s.quantile(0.9),
                 min_ps="min", max_ps="max", std_ps=lambda s: s.std(ddof=0)).reset_index()


def _random_steps(rng, n: int, scale: int) -> pd.DataFrame:
    return pd.DataFrame({"host": rng.choice(["h1", "h0", "host10"], n),
                         "device": pd.Categorical(rng.choice(["TPU:0", "TPU:1", "TPU:10"], n)),
                         "step": rng.integers(0, 30, n), "step_ps": rng.integers(1, 6, n) * scale,
                         "busy_ps": rng.integers(0, 100, n), "open_end": rng.random(n) < 0.2})


@pytest.mark.parametrize("seed", range(8))
def test_step_stats_equal_a_pandas_groupby(seed):
    rng = np.random.default_rng(seed)
    for scale in (1, 10**9, 7 * 10**11, 10**17):  # (small values: ties in median and mean; large: picosecond
        steps = _random_steps(rng, int(rng.integers(1, 80)), scale)  # steps; past 2**53: float64 rounds them)
        if scale > 2 ** 53:
            steps["step_ps"] += rng.integers(0, 999, len(steps))
        pd.testing.assert_frame_equal(stepstats.step_stats(steps, "step_ps"),
                                      _step_stats_by_pandas(steps, "step_ps"), check_exact=True)


@pytest.mark.parametrize("seed", range(8))
def test_slowest_device_equals_a_pandas_ranking(seed):
    rng = np.random.default_rng(100 + seed)
    for scale in (1, 10**9, 10**17):
        steps = _random_steps(rng, int(rng.integers(1, 80)), scale)
        if scale > 2 ** 53:  # (float64 rounds these: the sums as pandas adds them)
            steps["step_ps"] += rng.integers(0, 999, len(steps))
        st = stepstats.closed_steps(steps)
        g = st["step_ps"].groupby([st["host"].astype(str).to_numpy(), st["device"].astype(str).to_numpy()])
        rank = pd.DataFrame({"median": g.median(), "mean": g.mean()})
        key = rank.sort_values(["median", "mean"], ascending=False, kind="stable").index[0]
        t = st["step_ps"][(st["host"].astype(str) == key[0]) & (st["device"].astype(str) == key[1])].astype(float)
        median, mean, host, device, stats = stepstats.summary(steps).slowest
        assert (median, mean, host, device) == (rank.loc[key, "median"], rank.loc[key, "mean"], key[0], key[1])
        assert stats == {"timed_steps": len(t), "mean_ps": t.mean(), "p50_ps": t.quantile(0.5),
                         "p90_ps": t.quantile(0.9), "min_ps": t.min(), "max_ps": t.max()}


def test_step_stats_of_a_real_trace_equal_a_pandas_groupby():
    from tracekit.analysis import timeline
    tr = tracekit.load(cpu_fixture("async_dp8"))
    steps = timeline.step_breakdown(roofline.join(tr), tr.steps)
    assert len(steps) > 8
    pd.testing.assert_frame_equal(stepstats.step_stats(steps, "step_ps"), _step_stats_by_pandas(steps, "step_ps"),
                                  check_exact=True)


@pytest.mark.parametrize("case", ["collectives/mesh2x8", "collectives/ring16", "cpu/async_dp8"])
def test_collective_ops_per_host_equal_a_pandas_groupby(case):
    """Per collective op of one host (interconnect.host_part): its counts, sums and first execution against a
    pandas groupby of the same executions."""
    from conftest import FIXTURES
    from tracekit.analysis import collectives, interconnect
    tr = tracekit.load(FIXTURES / case)
    j = roofline.joined(tr)
    ex = collectives.executions(j.ops, j.model, instances=True)
    assert len(ex) > 0
    got = interconnect.host_part(j.ops, j.model).ops
    g = ex.groupby(interconnect.KEY, sort=False)
    want = g.agg(n=("start_ps", "size"), dur_sum=("duration_ps", "sum"), size_bytes=("size_bytes", "first"),
                 gmax=("group_size", "max"), bound=("bound", "first"), first_start=("start_ps", "first"),
                 first_host=("host", "first"), first_device=("device", "first")).reset_index()
    want["devices"] = [tuple(sorted(set(v))) for v in g["device"].agg(list)]
    want["pred_sum"] = g["predicted_ps"].sum().to_numpy(float)
    want["pred_n"] = g["predicted_ps"].count().to_numpy(np.int64)
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_exact=True)


def _device_steps_by_pandas(steps: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in steps.columns if c.endswith("_ps") and c not in ("step_ps", "start_ps")]
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(["host", "device"])
    closed = stepstats.closed_steps(steps)
    times = closed.assign(host=closed["host"].astype(str), device=closed["device"].astype(str)).groupby(
        ["host", "device"])["step_ps"].agg(step_ps_mean="mean", step_ps_median="median", step_ps_max="max")
    out = g["step_ps"].agg(steps="size", step_ps_sum="sum").join(times)
    return out.join(g[cols].sum()).reset_index()


@pytest.mark.parametrize("case", ["async_dp8", "train_step", "allreduce_exposed"])
def test_per_device_step_sums_equal_a_pandas_groupby(case):
    from tracekit.analysis import timeline
    from tracekit.report.engine.steps import device_steps
    tr = tracekit.load(cpu_fixture(case))
    steps = timeline.step_breakdown(roofline.join(tr), tr.steps)
    got = device_steps(steps)
    want = _device_steps_by_pandas(steps)[list(got.columns)]
    assert len(got) > 0 and "compute_ps" in got and "idle_ps" in got
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("seed", range(4))
def test_per_device_step_sums_of_random_steps(seed):
    from tracekit.report.engine.steps import device_steps
    rng = np.random.default_rng(300 + seed)
    for scale in (10**9, 10**17):  # (past 2**53 ps float64 rounds the step times' sums: the mean as pandas takes it)
        steps = _random_steps(rng, int(rng.integers(1, 80)), scale)
        steps["step_ps"] += rng.integers(0, 999, len(steps))
        steps["compute_ps"] = rng.integers(0, 10**9, len(steps))
        steps["idle_ps"] = rng.integers(0, 10**6, len(steps))
        got = device_steps(steps)
        want = _device_steps_by_pandas(steps.drop(columns=["busy_ps"]))[list(got.columns)]
        pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("case", ["collectives/mesh2x8", "collectives/mesh4x4x4", "cpu/async_dp8"])
def test_collective_instances_equal_a_pandas_groupby(case):
    """Each collective execution's k (its op's k-th execution on the device, in time order), its instance's
    traced participants and its wait for the last of them, against pandas' sort, cumcount and transform."""
    from conftest import FIXTURES
    from tracekit.analysis import collectives
    tr = tracekit.load(FIXTURES / case)
    j = roofline.joined(tr)
    ex = collectives.executions(j.ops, j.model, instances=True)
    assert len(ex) > 0 and (ex["traced_participants"] > 1).any()
    assert ex[["start_ps", "host", "device"]].equals(
        ex[["start_ps", "host", "device"]].sort_values(["start_ps", "host", "device"], kind="stable"))
    by_op = ex.sort_values(["host", "device", "program_id", "op", "is_async", "start_ps"], kind="stable")
    k = by_op.groupby(["host", "device", "program_id", "op", "is_async"], sort=False).cumcount()
    assert (k.sort_index() == ex["_k"]).all()
    inst = ex.groupby(["program_id", "op", "is_async", "_group", "_k"])["start_ps"]
    assert (inst.transform("size") == ex["traced_participants"]).all()
    wait = np.minimum(np.maximum(inst.transform("max") - ex["start_ps"], 0), ex["duration_ps"]).astype(float)
    wait[ex["traced_participants"] < 2] = np.nan
    pd.testing.assert_series_equal(wait, ex["skew_ps"], check_names=False, check_exact=True)


def test_modified_z_equals_the_formula_on_series():
    """Iglewicz-Hoaglin's modified z (outliers.modified_z, on arrays) against the formula written with pandas
    Series (median, abs, mean skipping NaN): constant values, a zero MAD, NaNs, an index of its own."""
    from tracekit.analysis.outliers import modified_z

    def by_series(x):
        med = x.median()
        dev = (x - med).abs()
        mad = dev.median()
        if mad > 0:
            return (0.6745 * (x - med) / mad).rename("z")
        mean_ad = dev.mean()
        return ((x - med) / (1.253314 * mean_ad) if mean_ad > 0 else (x - med) * 0.0).rename("z")
    rng = np.random.default_rng(7)
    cases = [[], [np.nan], [1.0], [5, 5, 5, 5], [1, 1, 1, 9], [1, 2, np.nan, 4, 100], [3, 3, 3, np.nan]]
    cases += [rng.integers(0, 5, rng.integers(1, 12)).astype(float) for _ in range(100)]
    cases += [np.where(rng.random(300) < 0.2, np.nan, rng.normal(1e12, 1e9, 300)) for _ in range(20)]
    for c in cases:
        x = pd.Series(c, index=np.arange(len(c)) * 3 + 7, dtype="float64")
        pd.testing.assert_series_equal(modified_z(x), by_series(x), check_exact=True)


@pytest.mark.parametrize("case", ["v6e", "cpu/async_dp8", "gpu-mi300x8"])
def test_hlo_frame_typed_as_put_in_equals_conform(case, monkeypatch):
    """The HLO frame built with its columns typed as they are put in (schema.frame_of) against conform() of the
    frame pandas infers from the same lists: values, dtypes and the categoricals' categories."""
    from conftest import FIXTURES
    from tracekit import schema
    from tracekit.ingest import hlo
    path = {"v6e": lambda: shared_trace("tpu/v6e-4_jax_inference.xplane.pb"),
            "gpu-mi300x8": lambda: shared_trace("gpu/mi300x8_jax_conv3d.xplane.pb")}.get(
        case, lambda: FIXTURES / case)()
    mods = tracekit.load(path).hlo_modules
    got = hlo.hlo_frame(mods)
    monkeypatch.setattr(schema, "frame_of", lambda cols, sch: schema.conform(pd.DataFrame(cols), sch))
    want = hlo.hlo_frame(mods)
    assert len(got) > 10
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    for c in got.columns:
        if isinstance(got[c].dtype, pd.CategoricalDtype):
            assert got[c].cat.categories.equals(want[c].cat.categories)
            assert got[c].cat.categories.dtype == want[c].cat.categories.dtype


def test_take_rows_equals_pandas_take_on_every_rule_frame():
    """columns.take_rows (a rule's narrowed evidence rows, from arrays) against pandas' column and row takes and
    assign, on every rule frame of the v6e trace (categorical, text, boolean, integer and float columns, and objects)."""
    from tracekit.columns import take_rows
    from tracekit.analysis import rule_checks
    tr = tracekit.load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb"))
    fr = rule_checks.frames_for_rules(roofline.join(tr), tr.steps, tr.host_events, modules=tr.modules)
    rng = np.random.default_rng(5)
    kinds = set()
    for name in ("ops", "op_stats", "collectives", "steps", "devices", "gaps"):
        df = fr[name]
        assert len(df) > 0, name
        kinds |= {str(t) for t in df.dtypes}
        for n in (0, 1, min(len(df), 17)):
            rows = np.sort(rng.choice(len(df), n, replace=False))
            cols = list(df.columns[rng.permutation(len(df.columns))[:8]])
            extra = {"x": pd.Series(rng.random(len(df)), index=df.index), cols[0]: df[cols[-1]],
                     "o": pd.Series([("t", i) for i in range(len(df))], dtype=object, index=df.index)}
            want = df.take(df.columns.get_indexer(cols), axis=1).take(rows)
            want = want.assign(**{k: v.iloc[rows] for k, v in extra.items()}).reset_index(drop=True)
            pd.testing.assert_frame_equal(take_rows(df, cols, rows, extra), want, check_exact=True)
    assert {"category", "bool", "int64", "float64", "float32", "str"} <= kinds, kinds


@pytest.mark.parametrize("case", ["v6e", "cpu/async_dp8", "collectives/mesh2x8"])
def test_op_rows_equal_the_names_compared_row_by_row(case):
    """The replay's rows of the ops a finding names (``op`` or ``module/op``), found once per distinct op, against
    each row's names compared as text."""
    from conftest import FIXTURES
    from tracekit.analysis.replay import fixes
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb") if case == "v6e" else FIXTURES / case
    ops = tracekit.load(path).ops
    rng = np.random.default_rng(3)
    o, m = ops["op"].astype(str).to_numpy(), ops["module"].astype(str).to_numpy()
    for _ in range(20):
        pick = rng.choice(len(ops), 3)
        names = [o[pick[0]], f"{m[pick[1]]}/{o[pick[1]]}", f"{m[pick[2]]}/nothing", "no-such-op"]
        want = np.array([a in names or f"{b}/{a}" in names for a, b in zip(o, m)])
        got = fixes.op_rows(ops, names)
        assert got.dtype == bool and (got == want).all() and want.any()


@pytest.mark.parametrize("case", ["v6e", "cpu/train_step", "cpu/attention"])
def test_instruction_extras_per_identity_equal_a_left_merge(case):
    """Each op identity's host-memory, transfer and dot figures from its HLO instruction (identity._hlo_extras,
    by a dict) against pandas' left merge on (program_id, op), filled and typed."""
    from conftest import FIXTURES
    from tracekit.model import identity
    tr = tracekit.load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb") if case == "v6e" else FIXTURES / case)
    u = tr.ops.drop_duplicates(["program_id", "op"])
    key = pd.DataFrame({"program_id": u["program_id"].astype(np.uint64).to_numpy(),
                        "op": u["op"].astype(str).to_numpy(dtype=object).astype(str)})
    cols = ["host_memory", "to_host", "transfer_bytes", "dot_m", "dot_n", "dot_k"]
    h = tr.hlo[~tr.hlo["is_fusion_computation"]][["program_id", "name"] + cols]
    h = h.rename(columns={"name": "op"}).drop_duplicates(["program_id", "op"]).astype({"op": str})
    fill = {"host_memory": False, "to_host": False, "transfer_bytes": 0, "dot_m": -1, "dot_n": -1, "dot_k": -1}
    want = key.merge(h, on=["program_id", "op"], how="left").fillna(fill).astype(
        {"host_memory": bool, "to_host": bool, **{c: np.int64 for c in cols[2:]}})
    got = identity._hlo_extras(tr, key)
    assert len(got) >= 5 and ((got["dot_m"] > 0).any() or (got["transfer_bytes"] > 0).any())
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def _choose_steps_by_pandas(steps: pd.DataFrame, ops_rows: int, max_nodes: int) -> list:
    """The capped step choice written with pandas: the device with the largest median step time (text order
    first among equal ones), its steps present on every device, the ``cap`` nearest its median (frame order
    among equal distances)."""
    closed = steps[~steps["open_end"].to_numpy(bool)]
    ndev = closed.groupby(["host", "device"], observed=True).ngroups
    per = closed.groupby("step")["device"].size()
    common = per[per == ndev].index.to_numpy(np.int64)
    if not len(common):
        common = per.index.to_numpy(np.int64)
    cap = max(int(max_nodes // max(ops_rows / max(int(steps["step"].nunique()), 1), 1.0)), 1)
    if len(common) <= cap:
        return sorted(common.tolist())
    dev = closed.assign(h=closed["host"].astype(str), d=closed["device"].astype(str))
    h, d = dev.groupby(["h", "d"])["duration_ps"].median().idxmax()
    mine = dev[(dev["h"] == h) & (dev["d"] == d) & dev["step"].isin(common)]
    near = (mine["duration_ps"] - mine["duration_ps"].median()).abs().sort_values(kind="stable")
    return sorted(mine.loc[near.index[:cap], "step"].astype(int).tolist())


@pytest.mark.parametrize("seed", range(8))
def test_replayed_steps_equal_the_choice_written_with_pandas(seed):
    """Which steps a capped replay takes (tracekit.analysis.replay.inputs.choose_steps, on arrays) equals the
    pandas formulation, on random step frames: devices missing steps, equal medians, equal distances, open ends."""
    from tracekit.analysis.replay import inputs
    rng = np.random.default_rng(seed)
    rows = []
    for h in ("h1", "h0"):
        for d in ("TPU:1", "TPU:0", "TPU:10"):
            n = int(rng.integers(5, 40))
            for s in sorted(rng.choice(60, n, replace=False).tolist()):
                rows.append((h, d, s, int(rng.integers(1, 6)) * 1000, bool(rng.random() < 0.1)))
    rng.shuffle(rows)
    steps = pd.DataFrame(rows, columns=["host", "device", "step", "duration_ps", "open_end"])
    steps[["host", "device"]] = steps[["host", "device"]].astype("category")
    for max_nodes in (1, 7, 50, 10 ** 6):
        got, _ = inputs.choose_steps(steps, 500, max_nodes)
        assert got == _choose_steps_by_pandas(steps, 500, max_nodes)


@pytest.mark.parametrize("case", ["train_step", "allreduce_exposed"])
def test_step_breakdown_host_and_device_are_its_text_in_text_order(case):
    """The step breakdown's host and device are categories in text order (grouped again and again downstream):
    each row's text is its device's, and the rows are in (host, device, start) text order."""
    from tracekit.analysis import timeline
    tr = tracekit.load(cpu_fixture(case))
    ops = roofline.join(tr)
    out = timeline.step_breakdown(ops, tr.steps, tr.modules)
    assert len(out) and all(isinstance(out[c].dtype, pd.CategoricalDtype) for c in ("host", "device"))
    assert list(out["device"].cat.categories) == sorted(out["device"].astype(str).unique())
    by_text = out.assign(host=out["host"].astype(str), device=out["device"].astype(str))
    assert by_text.equals(by_text.sort_values(["host", "device", "start_ps"], kind="stable", ignore_index=True))
    # every row is a step of the loader's on its own device (the text each code stands for is the row's)
    mine = set(zip(by_text["host"], by_text["device"], by_text["start_ps"].tolist()))
    assert len(mine) == len(out) and mine <= set(zip(tr.steps["host"].astype(str), tr.steps["device"].astype(str),
                                                     tr.steps["start_ps"].tolist()))


@pytest.mark.parametrize("case", ["train_step", "async_dp8", "blocking_dp8", "v6e", "v6e-long"])
def test_device_parts_step_columns_equal_a_pandas_groupby(case):
    """The overview's per-device step columns (read from arrays per device) equal a pandas groupby of the step
    breakdown by the device names: steps, total, the closed steps' mean, the host-offload wait per step; on XLA:CPU
    traces (virtual devices sharing one chip: the chip's step time), the v6e trace, and the v6e trace's steps made
    a million times longer (sums past 2**53 ps, where float64 rounds: the mean as pandas rounds it)."""
    from tracekit.analysis import overview, rule_checks
    v6e = case.startswith("v6e")
    tr = tracekit.load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb") if v6e else cpu_fixture(case))
    ops = roofline.join(tr)
    steps = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events, modules=tr.modules).steps
    if case == "v6e-long":  # (over 8192 steps a device: NumPy sums a cast in blocks, so the order shows)
        steps = pd.concat([steps] * (8192 // len(steps) * 4 + 4), ignore_index=True)
        steps = steps.assign(step_ps=steps["step_ps"] * 10 ** 6 + np.arange(len(steps)) * 7,
                             offload_wait_ps=steps["offload_wait_ps"] * 10 ** 6 + 3)
        per = steps.groupby("device", observed=True)["step_ps"].agg(["sum", "size"])
        assert per["sum"].min() > 2 ** 53 and per["size"].min() > 8192
    parts = overview.device_parts(ops, steps, roofline.device_chips(tr))
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str))
    want = []
    for (h, d), rows in g.groupby(["host", "device"], sort=True):
        closed = rows[~rows["open_end"]] if (~rows["open_end"]).any() else rows
        want.append((h, d, len(rows), int(rows["step_ps"].sum()), float(closed["step_ps"].mean()),
                     float(rows["offload_wait_ps"].mean())))
    got = list(zip(parts["host"], parts["device"], parts["steps"].tolist(), parts["step_total_ps"].tolist(),
                   parts["step_mean_ps"].tolist(), parts["offload_wait_per_step_ps"].tolist()))
    assert len(want) >= (1 if case == "train_step" else 4) and got == want


def _instruction_costs_by_records(module) -> pd.DataFrame:
    """instruction_costs as a frame of records cast afterwards (the oracle: pandas infers the text columns)."""
    from tracekit.model import cost
    model = cost._Model(module, None)
    runs, recs = model.executions(), []
    for cid in model.executable():
        n, parent = runs.get(cid, (float("nan"), ""))
        for inst, c in model.rows(cid):
            dt = cost.first_dtype(inst.shape)
            cdt = c.compute_dtype if inst.opcode not in cost._CONTROL else ""
            recs.append((module.name, model.comps[cid].name, inst.name, inst.opcode, dt,
                         cdt or cost.result_compute_dtype(dt), c.flops, c.transcendentals, c.bytes_read,
                         c.bytes_written, c.bytes_read + c.bytes_written, c.net_bytes, c.group_size, c.collective,
                         c.known, c.reason, c.note, c.model, n, parent, c.flops_hi, c.stated_flops, c.stated_source))
    return pd.DataFrame.from_records(recs, columns=cost.COLUMNS).astype(
        {"flops": float, "transcendentals": float, "bytes_read": float, "bytes_written": float,
         "bytes_accessed": float, "net_bytes": float, "group_size": int, "cost_known": bool, "executions": float,
         "flops_hi": float, "stated_flops": float})


@pytest.mark.parametrize("case", ["cpu/train_step", "cpu/while_dynamic", "cpu/async_dp8", "gpu", "v6e"])
def test_instruction_costs_equal_a_frame_of_records(case):
    """The per-instruction cost frame, built a typed column at a time, equals the frame of records cast
    afterwards: values and dtypes (text inferred as pandas infers it), every module of the trace."""
    from tracekit.model import cost
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb") if case == "v6e" else \
        shared_trace("gpu/mi300x8_jax_conv3d.xplane.pb") if case == "gpu" else cpu_fixture(case.split("/")[1])
    mods = tracekit.load(path).hlo_modules
    assert mods
    for m in mods:
        pd.testing.assert_frame_equal(cost.instruction_costs(m.proto), _instruction_costs_by_records(m.proto),
                                      check_exact=True)


@pytest.mark.parametrize("seed", range(4))
def test_key_codes_equal_values_equal_numbers(seed):
    """grouping.key_codes: two chosen rows get the same number exactly when their values in the columns are
    equal (missing values included, categorical and plain columns), compared value tuple by value tuple."""
    from tracekit.grouping import key_codes
    rng = np.random.default_rng(seed)
    n = 400
    df = pd.DataFrame({"host": pd.Categorical(rng.choice(["h0", "h1"], n)),
                       "device": pd.Categorical(rng.choice(["TPU:0", "TPU:1", None], n)),
                       "program_id": rng.choice([7, 9, 2 ** 63], n).astype(np.uint64),
                       "op": rng.choice(["copy-start", "all-gather-start", "fusion"], n)})
    a, b = rng.choice(n, 90), rng.choice(n, 60)  # (two sets of rows: their numbers agree)
    (ka, kb), space = key_codes(df, list(df.columns), a, b)
    key, rows = np.concatenate([ka, kb]), np.concatenate([a, b])
    assert key.min() >= 0 and key.max() < space
    tuples = [tuple(None if pd.isna(v) else v for v in df.iloc[r]) for r in rows.tolist()]
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (key[i] == key[j]) == (tuples[i] == tuples[j])


def test_start_codes_name_each_done_as_written_out():
    """hlo.start_codes: each -done row's -start op code equals the name worked out row by row (the program's
    done_to_start entry, else -done made -start) looked up among the op names; -1 where none has it."""
    from tracekit.ingest import hlo
    tr = tracekit.load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb"))
    ops, d2s = tr.ops, hlo.done_to_start(tr.hlo)
    d2s = {**d2s, next(iter(d2s)): "no-such-start"}  # (one -done whose -start is missing)
    rows = np.flatnonzero(ops["op"].astype(str).str.contains("-done").to_numpy())
    got = hlo.start_codes(ops, rows, d2s)
    cats = list(ops["op"].cat.categories)
    want = []
    for p, o in zip(ops["program_id"].to_numpy()[rows].tolist(), ops["op"].astype(str).to_numpy()[rows]):
        name = d2s.get((int(p), o), o.replace("-done", "-start", 1))
        want.append(cats.index(name) if name in cats else -1)
    assert len(rows) > 100 and got.tolist() == want and -1 in want and max(want) >= 0
