"""How far each headline number can be trusted: one of four classes, kept beside the number in the JSON envelope and
shown beside it in every format.

* ``exact``: counted — op executions, FLOPs and bytes counted from the HLO or the trace's own stats, buffer sizes
  from XLA's buffer assignment.
* ``measured``: timed — step time, busy and idle time, the step breakdown, gaps, a collective's exposed time.
* ``modelled``: from a model — a roofline (predicted time at the chip's peaks), the collective cost model, a
  finding's estimate of the time a fix wins back, a utilization against a datasheet or trace-stated peak.
* ``indicative``: a rough guide only — any figure that stands on an estimated or raised peak, and every efficiency,
  utilization or roofline figure on a CPU (its peaks are a calibration, an estimate or a rate the trace itself
  showed, and virtual devices share its cores): read it as an order of magnitude.

Where it sits in the envelope (docs/report-format.md, "trust"): ``overview.<part>.trust`` (step_time, flops,
bandwidth.<resource>, roofline, breakdown), ``summary.trust`` (key -> class for the summary's numbers),
``findings[].trust`` (the class of its claimed savings), ``chips[].trust`` (its peaks) and ``top_ops_trust``
(column -> class of the top-ops table). Old readers ignore these keys: every other value keeps its type.
"""
from __future__ import annotations

CLASSES = ("exact", "measured", "modelled", "indicative")
#: what each class means, as the reports' legend says it
MEANING = {"exact": "counted", "measured": "timed", "modelled": "from a roofline or cost model",
           "indicative": "a rough guide (estimated peaks, CPU efficiencies)"}
#: a rule's frame -> the class of its claimed savings (measured time, or a roofline/cost-model estimate)
FRAME_CLASS = {"gaps": "measured", "devices": "measured", "steps": "measured", "collectives": "measured",
               "host_events": "measured", "offload": "measured", "memory_devices": "exact",
               "memory_programs": "exact", "ops": "modelled", "op_stats": "modelled", "overview": "modelled",
               "parallel_axes": "modelled", "serving": "modelled"}


def _rough(chip: dict) -> bool:
    """A chip whose peaks are a rough guide: estimated, raised to a rate the trace showed, or a CPU."""
    return bool(chip.get("estimated") or chip.get("raised") or chip.get("family") == "cpu")


def peak_class(chips: list) -> str:
    """The class of a figure that divides by the chips' peaks: indicative when any is a rough guide."""
    return "indicative" if not chips or any(_rough(c) for c in chips) else "modelled"


def annotate(d: dict, rules=()) -> dict:
    """``d`` (the envelope) with its trust classes set in place; ``rules``: the rules that ran (their frames say
    what a finding's savings stand on). Returns ``d``."""
    chips = d.get("chips") or []
    rough = peak_class(chips)
    for c in chips:
        c["trust"] = "indicative" if _rough(c) else "modelled"
    ov = d.get("overview") or {}
    if ov.get("step_time"):
        ov["step_time"]["trust"] = "measured"
    if ov.get("breakdown"):
        ov["breakdown"]["trust"] = "measured"
    if ov.get("flops"):
        # given by the user or counted, divided by a measured time and a peak: as good as the peak
        ov["flops"]["trust"] = rough
        ov["flops"]["per_step_trust"] = "exact"
    for b in (ov.get("bandwidth") or {}).values():
        if isinstance(b, dict):
            b["trust"] = rough
    if ov.get("roofline"):
        ov["roofline"]["trust"] = rough
    par = d.get("parallelism") or {}
    for a in par.get("axes") or []:  # a limit divides a peak by a bandwidth: as good as the chip's numbers
        if (a.get("limit") or {}).get("kind", "none") != "none":
            a["limit"]["trust"] = rough
    for k in ("per_device_batch_tokens", "d_model", "d_ff", "params", "global_batch_tokens"):
        if isinstance(par.get(k), dict) and par[k].get("value") is not None:
            par[k]["trust"] = "exact"  # counted from the HLO's shapes (what they stand on: its source)
    s = d.get("summary")
    if isinstance(s, dict):
        s["trust"] = {"profiled_ps": "measured", "busy_ps": "measured", "idle_ps": "measured",
                      "op_time_ps": "measured", "collective_exposed_ps": "measured", "op_executions": "exact",
                      "steps": "exact", "time_by_bound_ps": rough, "roofline_coverage": "exact",
                      "claimed_savings_ps": _claims_class(d.get("findings") or [], rules, rough),
                      "above_roofline_floor_ps": rough}
    frame_of = {r.id: r.frame for r in rules}
    for f in d.get("findings") or []:
        f["trust"] = finding_class(f, frame_of.get(f.get("rule_id")), rough)
    d["top_ops_trust"] = {"total_ps": "measured", "occurrences": "exact", "flops": "exact",
                          "bytes_accessed": "exact", "roofline_ps": rough, "efficiency": rough,
                          "headroom_ps": rough, "bound_by": rough}
    return d


def finding_class(f: dict, frame: str | None, rough: str) -> str:
    """The class of a finding's claim: its rule's frame decides (measured time or a model's estimate); a model's
    estimate on rough peaks is indicative; a finding that claims no time is as exact as its frame."""
    cls = FRAME_CLASS.get(frame or "", "modelled")
    if cls == "modelled":
        return rough
    return cls


def _claims_class(findings: list, rules, rough: str) -> str:
    """The weakest class among the findings' claims (the union of their claims is no better than its parts)."""
    frame_of = {r.id: r.frame for r in rules}
    got = [finding_class(f, frame_of.get(f.get("rule_id")), rough) for f in findings if f.get("claims_time", True)]
    return max(got, key=CLASSES.index) if got else "measured"


def tag(cls: str | None) -> str:
    """'[measured]' beside a number in the reports ('' when the report predates trust classes)."""
    return f" [{cls}]" if cls in CLASSES else ""


def legend() -> str:
    """One line saying what the bracketed classes mean."""
    return "trust: " + "; ".join(f"[{c}] {MEANING[c]}" for c in CLASSES)
