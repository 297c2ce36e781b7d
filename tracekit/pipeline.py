"""The pipeline, stage by stage: load -> frames -> cost -> roofline -> timeline -> rules -> report."""
from __future__ import annotations

import pandas as pd

from tracekit.trace import Trace


def with_roofline(tr: Trace, chip: str | None = None) -> pd.DataFrame:
    """The ops frame with the roofline columns joined (cost model + chip table), when available."""
    try:
        from tracekit import roofline
    except ImportError:  # roofline stage not built yet
        return tr.ops
    return roofline.join(tr, chip=chip)
