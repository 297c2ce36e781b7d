"""Which devices or hosts stand apart from the rest: the modified z-score (Iglewicz–Hoaglin: robust to the
outliers it looks for) of a per-device or per-host figure, and the stragglers it names."""
from __future__ import annotations

import numpy as np
import pandas as pd


def modified_z(values: pd.Series) -> pd.Series:
    """Modified z-score ``0.6745·(x − median) / MAD`` (Iglewicz–Hoaglin). When MAD is 0 the mean absolute
    deviation is used instead, ``(x − median) / (1.253314·meanAD)``; when that is 0 too every z is 0. NaN in, NaN
    out (NaNs are ignored for the median and MAD)."""
    x = pd.Series(values, dtype="float64")
    v = x.to_numpy()
    ok = ~np.isnan(v)  # (on arrays: a few devices' values, where each Series operation costs more than its sum)
    med = float(np.median(v[ok])) if ok.any() else np.nan
    dev = np.abs(v - med)
    mad = float(np.median(dev[ok])) if ok.any() else np.nan
    if mad > 0:
        z = 0.6745 * (v - med) / mad
    else:
        mean_ad = float(np.where(ok, dev, 0.0).sum() / ok.sum()) if ok.any() else np.nan  # (pandas: NaN as 0)
        z = (v - med) / (1.253314 * mean_ad) if mean_ad > 0 else (v - med) * 0.0
    return pd.Series(z, index=x.index, name="z")


def outliers(values: pd.Series, threshold: float = 3.5) -> pd.DataFrame:
    """``value``, modified ``z`` and ``is_outlier`` (|z| > threshold) for each element of ``values``."""
    z = modified_z(values)
    return pd.DataFrame({"value": pd.Series(values, dtype="float64"), "z": z, "is_outlier": z.abs() > threshold})


def straggler_devices(devices: pd.DataFrame, metric: str = "busy_ps", threshold: float = 3.5) -> pd.DataFrame:
    """``devices`` (e.g. :func:`tracekit.analysis.timeline.device_summary`) with ``{metric}_z`` (modified z across
    all devices), ``{metric}_median`` and ``is_straggler`` (z > threshold: slower, i.e. larger, than the rest)."""
    out = devices.copy()
    out[f"{metric}_z"] = modified_z(out[metric]).to_numpy()
    out[f"{metric}_median"] = out[metric].median()
    out["is_straggler"] = out[f"{metric}_z"] > threshold
    return out


def straggler_hosts(devices: pd.DataFrame, metric: str = "busy_ps", threshold: float = 3.5) -> pd.DataFrame:
    """Per host: the mean of ``metric`` over its devices, its modified z across hosts, and ``is_straggler``."""
    per = devices.assign(host=devices["host"].astype(str)).groupby("host")[metric].mean().rename(metric).reset_index()
    return straggler_devices(per, metric, threshold)
