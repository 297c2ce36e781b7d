"""Issue 38: a trace-viewer JSON says once that it has no HLO (the JSON reader's warning, which also names what
else the format lacks), not twice; an XSpace without HLO still says it."""
from __future__ import annotations

from pathlib import Path

import tracekit

ROOT = Path(__file__).resolve().parent.parent


def test_json_trace_says_no_hlo_once():
    tr = tracekit.load(str(ROOT / "fixtures/cpu/async_1dev/plugins/profile/run1/cpu.trace.json.gz"))
    said = [w for w in tr.warnings if "no HLO" in w]
    assert len(said) == 1 and "trace-viewer JSON" in said[0], said
