"""Hosts that hold the others back, read from a report: one row per host with its step times and busy time,
and the outliers among them by the modified z-score ``0.6745·(x − median)/MAD`` (|z| > 3.5, as xprof)."""
from __future__ import annotations

import numpy as np
import pandas as pd

STRAGGLER_Z = 3.5


def host_summary(report, threshold: float = STRAGGLER_Z) -> pd.DataFrame:
    """One row per host from a report (or its ``data`` dict): devices, steps, step_ps_mean / step_ps_median /
    step_ps_max (over its devices' steps), busy_ps and span_ps (mean over its devices), the modified z-scores of
    step_ps_mean and busy_ps across hosts, and ``is_straggler`` (either z above ``threshold``). Sorted by host."""
    from tracekit.analysis.outliers import modified_z
    data = getattr(report, "data", report)
    dev = pd.DataFrame(data.get("devices") or [], columns=["host", "device", "busy_ps", "span_ps"])
    st = pd.DataFrame(data.get("device_steps") or [],
                      columns=["host", "device", "steps", "step_ps_sum", "step_ps_median", "step_ps_max"])
    per = dev.groupby("host").agg(devices=("device", "nunique"), busy_ps=("busy_ps", "mean"),
                                  span_ps=("span_ps", "mean"))
    if len(st):
        g = st.groupby("host")
        s = pd.DataFrame({"steps": g["steps"].sum(), "step_ps_mean": g["step_ps_sum"].sum() / g["steps"].sum(),
                          "step_ps_median": g["step_ps_median"].median(), "step_ps_max": g["step_ps_max"].max()})
        per = per.join(s, how="outer")
    else:
        per = per.assign(steps=0, step_ps_mean=np.nan, step_ps_median=np.nan, step_ps_max=np.nan)
    per = per.reset_index().sort_values("host", ignore_index=True)
    per["steps"] = per["steps"].fillna(0).astype("int64")
    per["devices"] = per["devices"].fillna(0).astype("int64")
    few = len(per) < 3
    for c in ("step_ps_mean", "busy_ps"):
        per[f"{c}_z"] = np.nan if few else modified_z(per[c]).to_numpy()
    per["is_straggler"] = (per["step_ps_mean_z"] > threshold) | (per["busy_ps_z"] > threshold)
    return per[["host", "devices", "steps", "step_ps_mean", "step_ps_median", "step_ps_max", "busy_ps", "span_ps",
                "step_ps_mean_z", "busy_ps_z", "is_straggler"]]


def stragglers(report, threshold: float = STRAGGLER_Z) -> list[str]:
    """Hosts whose mean step time or busy time is an outlier (modified z-score above ``threshold``)."""
    s = host_summary(report, threshold)
    return s.loc[s["is_straggler"], "host"].tolist()
