"""A loaded multi-host :class:`~tracekit.ingest.trace.Trace` as one trace per host: what the engine maps when it is
handed a loaded trace (the hook, ``tracekit capture``, ``tracekit diff``) instead of files."""
from __future__ import annotations

import pandas as pd

from tracekit import schema
from tracekit.ingest import hlo
from tracekit.ingest.trace import Trace


def per_host(tr: Trace) -> list[Trace]:
    """The one-host traces of a loaded trace, in host order (itself when it has one host): each host's rows of
    every frame, its own HLO modules (:attr:`Trace.module_hosts`), device stats and profile window; the loader's
    warnings go with the first. Categories no row of a host uses are dropped, so each is what loading that host
    alone gives up to the order of its categories."""
    hosts = list(tr.hosts) or sorted({str(h) for h in tr.devices["host"]}) or ["host"]
    if len(hosts) == 1:
        if not tr.hosts:
            tr.hosts = hosts
        return [tr]
    paths = list(tr.paths) + [""] * (len(hosts) - len(tr.paths))

    def rows(df):
        if df is None or not len(df) or "host" not in df.columns:
            return df
        out = df[(df["host"].astype(str) == h).to_numpy()].reset_index(drop=True)
        for c in out.columns:
            if isinstance(out[c].dtype, pd.CategoricalDtype):
                out[c] = out[c].cat.remove_unused_categories()
        return out
    out = []
    for i, h in enumerate(hosts):
        mods = [m for m in tr.hlo_modules if h in tr.module_hosts.get((m.name, m.program_id), (h,))]
        hl = schema.conform(hlo.hlo_frame(mods), schema.HLO) if len(mods) != len(tr.hlo_modules) else tr.hlo
        out.append(Trace(ops=rows(tr.ops), hlo=hl, modules=rows(tr.modules), steps=rows(tr.steps),
                         lines=rows(tr.lines), devices=rows(tr.devices), host_events=rows(tr.host_events),
                         memory_events=rows(tr.memory_events), kernel_profile=rows(tr.kernel_profile), hlo_modules=mods,
                         device_stats={k: v for k, v in tr.device_stats.items() if str(k[0]) == h}, hosts=[h],
                         paths=[paths[i]], warnings=list(tr.warnings) if i == 0 else [],
                         profile_spans={h: tr.profile_spans[h]} if h in tr.profile_spans else {}))
    return out
