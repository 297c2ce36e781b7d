"""Every rule on one host's frames (the map side of the findings, :mod:`tracekit.report.engine.findings`).

A rule on a frame with a row per event (:data:`HOST_FRAMES`: ops, collectives, gaps, host events, steps) is
evaluated here, on the host that holds those rows, and summarized (:class:`tracekit.analysis.evidence.Evidence`:
exact counts, totals, per-device savings, the top rows); the reduce merges the hosts' summaries into the finding.
Rules on the pod-wide frames (op statistics, devices, memory, overview) are evaluated by the reduce on the merged
frames. Every rule with evidence here also lays its claims on this host's device time
(:func:`tracekit.analysis.claims.claim_intervals`), kept as :class:`tracekit.analysis.claims.Atoms`: the reduce
unions the claims of the rules that became findings, exactly as one process does on one host.
"""
from __future__ import annotations


from tracekit.analysis import claims as claims_mod
from tracekit.records import record

#: frames with a row per event (or per device and step): rules reading them run where the rows are, per host
HOST_FRAMES = frozenset({"ops", "collectives", "gaps", "host_events", "steps"})


@record(frozen=True)
class HostRules:
    """What the rules found on one host."""

    evidence: tuple  #: (rule id, Evidence) of the rules on a :data:`HOST_FRAMES` frame that found rows here
    nonempty: frozenset  #: the :data:`HOST_FRAMES` this host has rows in
    claims: claims_mod.Atoms  #: the claims of every rule with evidence here, per device
    floor: dict | None  #: (host, device) -> sync op time at the roofline floor (None: no roofline columns)
    #: a one-host run's :class:`PodRows` (the reduce takes them instead of evaluating those rules again), else None
    pod: object = None


@record(frozen=True)
class PodRows:
    """The evidence rows a one-host run's host found for the rules on pod-wide frames, and the frames they read:
    the reduce evaluates those rules on its merged frames, which for one host hold the same rows; where a frame
    equals the host's (``DataFrame.equals``), the host's rows are the reduce's (:func:`pod_rows`)."""

    rows: dict  #: rule id -> evidence rows (empty: the rule found none)
    frames: dict  #: frame name -> the host's frame those rules read


def pod_rows(pod, rule, frames, same: dict):
    """The evidence rows the host kept for ``rule`` (a :class:`PodRows`, or None), when every frame the rule reads
    equals the host's (``same``: frame name -> whether it does, filled as frames are compared); else None (the
    caller evaluates the rule). Only rules that read their frames through expressions: a check reads what it
    likes."""
    if pod is None or rule.check or rule.id not in pod.rows:
        return None
    for name in _reads(rule):
        if name not in same:
            same[name] = _equal(pod.frames.get(name), frames.get(name))
        if not same[name]:
            return None
    return pod.rows[rule.id]


def _equal(mine, theirs) -> bool:
    """Whether two frames hold the same columns, in order, and values (NaN equal to NaN); False when pandas cannot
    tell (a column of arrays): the rule is then evaluated again."""
    if mine is None or theirs is None or list(mine.columns) != list(theirs.columns):
        return False
    try:
        return bool(mine.equals(theirs))
    except (TypeError, ValueError):
        return False


def _reads(rule) -> tuple:
    """The frames an expression rule reads: its own, those it needs, and the serving programs a training rule
    leaves out (:func:`tracekit.analysis.rules.workload_rows`)."""
    return (rule.frame, *rule.needs) + (("serving",) if rule.workload == "training" else ())


def evaluate(frames, rule_items: list, max_evidence: int, keep=None, kept: dict | None = None,
             one_host: bool = False) -> HostRules:
    """:class:`HostRules` of ``frames`` (one host's :class:`tracekit.analysis.rule_checks.RuleFrames`);
    ``rule_items``: [(rule, resolved params)] of every rule. ``kept``: filled with rule id -> (evidence rows,
    summary or None) of the rules with evidence for which ``keep(rule)`` holds (what a later section reads again).
    ``one_host``: the run has this host alone: the rows of the rules on pod-wide frames go to the reduce
    (:class:`PodRows`)."""
    from tracekit.analysis import evidence, rules
    out, laid = [], {}
    pod: dict | None = {} if one_host else None
    for rule, params in rule_items:
        if rules.applicable(rule, frames):
            continue
        try:
            ev = rules.evidence_rows(rule, frames, params)
        except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError) as e:
            raise rules.failed(rule, e) from None
        if pod is not None and rule.frame not in HOST_FRAMES and not rule.check:
            pod[rule.id] = (rule, ev)
        if ev.empty:
            continue
        laid[rule.id] = claims_mod.claim_intervals(rule.frame, ev, frames, rule.time)
        summary = evidence.summarize(rule, ev, max_evidence) if rule.frame in HOST_FRAMES else None
        if summary is not None:
            out.append((rule.id, summary))
        if kept is not None and keep is not None and keep(rule):
            kept[rule.id] = (ev, summary)
    nonempty = frozenset(k for k in HOST_FRAMES if frames.get(k) is not None and len(frames[k]))
    pod_part = None
    if pod:
        names = {n for rule, _ in pod.values() for n in _reads(rule)}
        pod_part = PodRows({k: ev for k, (_, ev) in pod.items()},
                           {n: frames[n] for n in names if frames.get(n) is not None})
    return HostRules(tuple(out), nonempty, claims_mod.atoms(laid), claims_mod.floor_per_device(frames["ops"]),
                     pod_part)


def rule_items(options) -> list:
    """[(rule, resolved params)] of every rule ``options`` select. Rule objects hold compiled expressions, which do
    not travel between processes: each process loads the files (each parsed once per version of the file,
    :func:`tracekit.analysis.rule_model.load_rules`)."""
    from tracekit.analysis import rule_model
    params = options.params_dict
    loaded = rule_model.load_rules(extra_dirs=options.rules_dirs, select=options.select, ignore=options.ignore)
    return [(r, r.resolve(rule_model.params_for(r, params))) for r in loaded]
