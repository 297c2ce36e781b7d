"""Hosts told apart: whether the hosts of one report were profiled together and ran the same programs, and the
host label of a program's rows.

:func:`warnings` is the one place the two checks are made; the engine's ``warnings`` section
(:mod:`tracekit.report.engine.modelwarnings`) calls it once in its reduce, whatever engine mapped the hosts, with
each host's part: its profile window (the ``Task Environment`` plane's ``profile_start_time``/
``profile_stop_time``, wall-clock ns; unknown for a trace without it) and the names of the programs that ran on
it. Program *names* are compared, not program ids: on CPU and GPU each process
numbers its programs itself.
"""
from __future__ import annotations

import datetime as _dt

#: how many programs / hosts one warning names
NAMED = 4


def programs_by_host(ops) -> dict[str, set[str]]:
    """host -> names of the programs with synchronous op executions there, from an ops frame (``host``,
    ``module``, ``is_async`` columns)."""
    from tracekit.grouping import unique_rows
    if not len(ops):
        return {}
    out: dict[str, set[str]] = {}
    for h, m, a in unique_rows(ops, ["host", "module", "is_async"])[1]:
        if not a:
            out.setdefault(str(h), set()).add(str(m))
    return out


def program_hosts(ops) -> dict[tuple[str, int], tuple[str, ...]]:
    """(module, program id) -> the hosts it ran on (sorted), from an ops frame."""
    from tracekit.grouping import unique_rows
    out: dict[tuple[str, int], set[str]] = {}
    for m, p, h in unique_rows(ops, ["module", "program_id", "host"])[1]:
        out.setdefault((str(m), int(p)), set()).add(str(h))
    return {k: tuple(sorted(h)) for k, h in out.items()}


def hosts_label(hosts, n_hosts: int) -> str:
    """'hostB', 'hostA,hostB', or 'all 8 hosts' for the hosts a row's program ran on (comma-separated text or a
    sequence)."""
    hosts = [h for h in hosts.split(",") if h] if isinstance(hosts, str) else [str(h) for h in hosts or ()]
    if n_hosts > 2 and len(hosts) == n_hosts:
        return f"all {n_hosts} hosts"
    return ",".join(hosts) if len(hosts) <= NAMED else f"{len(hosts)} of {n_hosts} hosts"


def _utc(ns: int) -> str:
    t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def warnings(spans: dict, programs: dict) -> list[str]:
    """At most two lines: the hosts' profile windows (``spans``: host -> (start ns, stop ns)) have no time in
    common; the hosts (``programs``: host -> set of program names that ran there) did not all run the same
    programs. Nothing for one host, or where what is needed is unknown."""
    out = []
    known = {h: (int(a), int(b)) for h, (a, b) in spans.items() if a and b and b >= a}
    if len(known) >= 2:
        late = max(known, key=lambda h: (known[h][0], h))
        early = min(known, key=lambda h: (known[h][1], h))
        if known[late][0] >= known[early][1]:
            gap = (known[late][0] - known[early][1]) / 1e9
            out.append(f"the hosts were not profiled together: {late}'s profile starts at {_utc(known[late][0])} "
                       f"UTC, {gap:.3g} s after {early}'s stops ({_utc(known[early][1])} UTC) (each trace's profile "
                       "start and stop times); comparisons across hosts (stragglers, step skew, collective waits) "
                       "do not hold")
    ran = {h: set(p) for h, p in programs.items() if p}
    if len(ran) >= 2:
        hosts = sorted(ran)
        every = set.union(*ran.values())
        partial = sorted((p for p in every if sum(p in s for s in ran.values()) < len(ran)),
                         key=lambda p: (sum(p in s for s in ran.values()), p))
        if partial:
            def where(p):
                on = [h for h in hosts if p in ran[h]]
                return f"{p} only on {hosts_label(on, len(hosts))}"
            named = "; ".join(where(p) for p in partial[:NAMED]) + (f"; {len(partial) - NAMED} more"
                                                                   if len(partial) > NAMED else "")
            out.append(f"the {len(hosts)} hosts did not run the same programs: {named}; rows of programs with the "
                       "same name on different hosts are told apart by their host")
    return out
