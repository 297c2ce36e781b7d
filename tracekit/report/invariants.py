"""The report checks itself before it prints: one pass over the JSON envelope (``Report.data``) that names every
place where the report would contradict physics or itself. It reports and never clamps: each violation becomes one
entry of ``invariant_violations`` (``check``, ``where``, ``message``) and one line of ``warnings``, and the numbers
stay as computed, so the cause can be fixed where it is made.

The checks (docs/report-format.md, "invariant_violations"):

* ``utilization``: no utilization figure above 100 % — the overview's FLOPs, bandwidth and at-roofline figures, each
  device's busy share, utilization figures in a finding's evidence (``mfu``, ``utilization``) and in its message
  ("utilization is 12.0%", "would be 87.5%").
* ``efficiency``: a per-op roofline efficiency above 100 % only on an op that has its model warning
  (``model_warnings`` names its module and op).
* ``peak``: every peak of a chip at most its physical ceiling (``chips[].limits``).
* ``breakdown``: the step breakdown's buckets add up to the step time (overview and per device: compute +
  exposed collectives + waits + idle = the steps' time; each of compute, waits and idle = its parts).
* ``consistency``: a finding's figure equals the overview's for the same quantity (TK024's utilization and
  at-roofline utilization against the overview's, to the message's rounding).
* ``zero-claim``: no finding whose claim rounds to 0: a rule that claims time must claim some (``claims_time``
  and ``savings_ps`` > 0), and no message says a time of "~0 ps".
* ``trust``: every headline number has its trust class (:mod:`tracekit.report.trust`): the overview's parts,
  the summary's and every finding.
* ``label``: no label that says nothing: steps counted with no source named ("0 step(s) from none"), sources
  named "none"/"raised"/"?".
"""
from __future__ import annotations

import math
import re

#: slack for a figure computed in floating point (a utilization of exactly 100 % may come out at 1 + 1e-15)
EPS = 1e-6
#: the overview's breakdown buckets (tracekit.analysis.overview.BUCKETS), which partition the steps' time
BUCKETS = ("compute_bound_ps", "memory_bound_ps", "compute_other_ps", "collective_exposed_ps", "offload_wait_ps",
           "async_wait_ps", "host_idle_ps", "launch_idle_ps", "other_idle_ps")
#: per device (``device_steps``): coarse bucket -> its parts; the coarse buckets partition ``step_ps_sum``
COARSE = {"compute_ps": ("compute_bound_ps", "memory_bound_ps", "compute_other_ps"),
          "collective_exposed_ps": ("collective_exposed_ps",),
          "wait_ps": ("offload_wait_ps", "async_wait_ps"),
          "idle_ps": ("host_idle_ps", "launch_idle_ps", "other_idle_ps")}
_PCT = re.compile(r"(utilization(?: is)?|MFU(?: is)?|would be)\s+(-?\d[\d,]*(?:\.\d+)?)%")
_ZERO_TIME = re.compile(r"(?<![\d.])~?0 ps\b")
_EMPTY_SOURCE = ("", "none", "raised", "?", "unknown")
_PREFIX = "report check failed"


def _num(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def check(d: dict) -> list[dict]:
    """Every violation in the report data ``d``: dicts ``check``, ``where``, ``message`` (empty: none)."""
    out: list[dict] = []

    def bad(kind: str, where: str, message: str) -> None:
        out.append({"check": kind, "where": where, "message": message})
    _utilization(d, bad)
    _efficiency(d, bad)
    _peaks(d, bad)
    _breakdown(d, bad)
    _consistency(d, bad)
    _claims(d, bad)
    _labels(d, bad)
    _trust(d, bad)
    return out


def self_checked(rep):
    """``rep`` (a :class:`tracekit.report.envelope.Report`) with its own check: ``invariant_violations`` and a
    warning per violation in its data. Reports, never clamps. Returns ``rep``."""
    try:
        found = check(rep.data)
    except (TypeError, ValueError, AttributeError, KeyError) as e:  # data of an odd shape: say so, never fail
        found = [{"check": "self-check", "where": "report", "message": f"the check could not run ({e!r})"}]
    rep.data["invariant_violations"] = found
    rep.data["warnings"] = list(rep.data.get("warnings") or []) + warning_lines(found)
    return rep


def warning_lines(violations: list[dict]) -> list[str]:
    """The violations as report warnings, one line each."""
    return [f"{_PREFIX} ({v['check']}, {v['where']}): {v['message']}" for v in violations]


def _utilization(d: dict, bad) -> None:
    ov = d.get("overview") or {}
    figs = [("overview.flops.utilization", (ov.get("flops") or {}).get("utilization")),
            ("overview.roofline.utilization_at_possible", (ov.get("roofline") or {}).get("utilization_at_possible"))]
    figs += [(f"overview.flops.{k}", (ov.get("flops") or {}).get(k)) for k in ("hfu", "mfu")]
    figs += [(f"overview.bandwidth.{k}.utilization", (b or {}).get("utilization"))
             for k, b in sorted((ov.get("bandwidth") or {}).items())]
    figs += [(f"devices[{r.get('host')}/{r.get('device')}].utilization", r.get("utilization"))
             for r in d.get("devices") or []]
    s = d.get("summary") or {}
    if _num(s.get("profiled_ps")) and _num(s.get("busy_ps")) is not None:
        figs.append(("summary busy_ps / profiled_ps", s["busy_ps"] / s["profiled_ps"]))
    for i, f in enumerate(d.get("findings") or []):
        for j, ev in enumerate(f.get("evidence") or []):
            for k in ("mfu", "utilization", "mfu_possible"):
                figs.append((f"findings[{i}] {f.get('rule_id')} evidence[{j}].{k}", ev.get(k)))
        for m in _PCT.finditer(f.get("message") or ""):
            figs.append((f"findings[{i}] {f.get('rule_id')} message", float(m.group(2).replace(",", "")) / 100))
    for where, v in figs:
        v = _num(v)
        if v is not None and v > 1 + EPS:
            bad("utilization", where, f"a utilization of {100 * v:.1f}% is above 100%: a peak or a count is off")


def _efficiency(d: dict, bad) -> None:
    warned = {(str(w.get("module")), str(w.get("op"))) for w in d.get("model_warnings") or [] if w.get("op")}
    for r in d.get("top_ops") or []:
        e = _num(r.get("efficiency"))
        if e is not None and e > 1 + EPS and (str(r.get("module")), str(r.get("op"))) not in warned:
            bad("efficiency", f"top_ops {r.get('module')}/{r.get('op')}",
                f"efficiency {100 * e:.0f}% is above its roofline without a model warning on that op")


def _peaks(d: dict, bad) -> None:
    for c in d.get("chips") or []:
        lim = c.get("limits") or {}
        pairs = [(f"peak_flops_per_s.{k}", v) for k, v in sorted((c.get("peak_flops_per_s") or {}).items())]
        pairs.append(("hbm_bw_bytes_per_s", c.get("hbm_bw_bytes_per_s")))
        for key, v in pairs:
            v, ceiling = _num(v), _num((lim.get(key) or {}).get("value"))
            if v is not None and ceiling is not None and v > ceiling * (1 + EPS):
                bad("peak", f"chips[{c.get('name')}].{key}", f"peak {v:.4g} is above its ceiling {ceiling:.4g} "
                    f"({(lim.get(key) or {}).get('source', 'ceiling')})")


def _breakdown(d: dict, bad) -> None:
    bd = (d.get("overview") or {}).get("breakdown") or {}
    if bd.get("step_ps"):
        tot = sum(int(bd.get(k) or 0) for k in BUCKETS)
        if tot != int(bd["step_ps"]):
            bad("breakdown", "overview.breakdown", f"the buckets add up to {tot} ps, the steps take {bd['step_ps']} ps")
    for r in d.get("device_steps") or []:
        where = f"device_steps[{r.get('host')}/{r.get('device')}]"
        step = r.get("step_ps_sum")
        if step is None:
            continue
        tot = sum(int(r.get(k) or 0) for k in COARSE)
        if tot != int(step):
            bad("breakdown", where,
                f"compute + exposed collectives + waits + idle = {tot} ps, the steps take {step} ps")
        for k, parts in COARSE.items():
            if len(parts) > 1 and all(p in r for p in parts):
                sub = sum(int(r.get(p) or 0) for p in parts)
                if sub != int(r.get(k) or 0):
                    bad("breakdown", f"{where}.{k}", f"{k} is {r.get(k)} ps but its parts ({', '.join(parts)}) add "
                                                     f"up to {sub} ps")


def _message_pct(msg: str, words: str) -> float | None:
    m = re.search(rf"{words}\s+(-?\d[\d,]*(?:\.\d+)?)%", msg)
    return float(m.group(1).replace(",", "")) / 100 if m else None


def _consistency(d: dict, bad) -> None:
    ov = d.get("overview") or {}
    # TK024 reads the devices' executed (hardware) FLOPs: its figures are the overview's HFU, which is the headline
    # utilization unless the model's FLOPs replace it (--model-flops-per-step, --model, the trace's model_flops)
    fl, rf = ov.get("flops") or {}, ov.get("roofline") or {}
    pairs = {"utilization is": fl.get("hfu", fl.get("utilization")),
             "would be": rf.get("hfu_at_possible", rf.get("utilization_at_possible"))}
    for i, f in enumerate(d.get("findings") or []):
        if f.get("rule_id") != "TK024":
            continue
        for words, want in pairs.items():
            got, want = _message_pct(f.get("message") or "", words), _num(want)
            if got is None or want is None:
                continue
            # the message shows two decimals of a percent; the overview keeps 6 significant digits
            if abs(got - want) > 0.00005 + 1e-4 * abs(want):
                bad("consistency", f"findings[{i}] TK024", f"says {words} {100 * got:.2f}%, the overview "
                                                           f"{100 * want:.2f}% for the same quantity")


def _claims(d: dict, bad) -> None:
    for i, f in enumerate(d.get("findings") or []):
        where = f"findings[{i}] {f.get('rule_id')}"
        if f.get("claims_time", True) and not (_num(f.get("savings_ps")) or 0) > 0:
            bad("zero-claim", where, "the rule claims time but this finding's claim is 0 ps: it should not be reported")
        if _ZERO_TIME.search(f.get("message") or ""):
            bad("zero-claim", where, "its message claims a time of 0 ps")


def _labels(d: dict, bad) -> None:
    s = d.get("summary") or {}
    src = [str(x) for x in s.get("step_source") or []]
    if s.get("steps") and (not src or any(x.strip().lower() in _EMPTY_SOURCE for x in src)):
        bad("label", "summary.step_source", f"{s['steps']} step(s) from {', '.join(src) or 'no named source'}")
    st = (d.get("overview") or {}).get("step_time") or {}
    if st.get("steps") and str(st.get("source") or "").strip().lower() in _EMPTY_SOURCE:
        bad("label", "overview.step_time.source", f"steps from {st.get('source')!r}")
    texts = [(f"findings[{i}] {f.get('rule_id')} message", f.get("message") or "")
             for i, f in enumerate(d.get("findings") or [])]
    texts += [(f"warnings[{i}]", w) for i, w in enumerate(d.get("warnings") or [])
              if isinstance(w, str) and not w.startswith(_PREFIX)]
    for where, t in texts:
        m = re.search(r"\(?from (none|raised|\?)\)?(?![\w-])", t)
        if m:
            bad("label", where, f"a label that says nothing: {m.group(0)!r}")


def _trust(d: dict, bad) -> None:
    from tracekit.report.trust import CLASSES
    ov = d.get("overview") or {}
    parts = [(f"overview.{k}", ov.get(k)) for k in ("step_time", "flops", "roofline", "breakdown")]
    parts += [(f"overview.bandwidth.{k}", b) for k, b in sorted((ov.get("bandwidth") or {}).items())]
    parts += [(f"findings[{i}] {f.get('rule_id')}", f) for i, f in enumerate(d.get("findings") or [])]
    for where, part in parts:
        if part and part.get("trust") not in CLASSES:
            bad("trust", where, f"no trust class (one of {', '.join(CLASSES)})")
    st = (d.get("summary") or {}).get("trust")
    if d.get("summary") and not (isinstance(st, dict) and all(v in CLASSES for v in st.values())):
        bad("trust", "summary.trust", "the summary's numbers have no trust classes")
