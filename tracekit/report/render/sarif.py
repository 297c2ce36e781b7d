"""SARIF 2.1.0, for code-scanning tools (GitHub code scanning, IDE SARIF viewers).

One run; ``tool.driver.rules`` lists every rule the analysis ran (a finding that went away then closes its alert),
with its summary, why it matters (fullDescription), the fix (help) and its severity as the default level.
One result per finding: level ``error``/``warning``/``note`` from the severity, the finding's message, and its
savings in ``properties``. A result is located at the Python source line of the op its evidence names when the
trace's HLO metadata has one (``top_ops[].source_file/source_line``), else at the trace file itself. Paths under
the working directory are written relative to it; other absolute paths as ``file://`` URIs. Deterministic: no
timestamps, no invocation details.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import PurePosixPath
from urllib.parse import quote

EXTENSIONS = (".sarif",)
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
RELATED = 10


def artifact_uri(path: str, root: str | None = None) -> str:
    """A URI reference for ``path``: relative (``/``-separated, percent-encoded) when it is relative or inside
    ``root`` (default: the working directory), else an absolute ``file://`` URI."""
    p = str(path).replace("\\", "/")
    if os.path.isabs(p):
        base = os.path.abspath(root or os.getcwd())
        rel = os.path.relpath(p, base) if os.path.splitdrive(p)[0] == os.path.splitdrive(base)[0] else ".."
        if rel.startswith(".."):
            return "file://" + quote(p if p.startswith("/") else "/" + p, safe="/:")
        p = rel.replace(os.sep, "/")
    return quote(str(PurePosixPath(p)), safe="/")


def _rule_meta(rule_ids: list[str], findings: list[dict], rules) -> list[dict]:
    """``tool.driver.rules``: each rule as the analysis ran it (``rules``, from the Report), else (a report read
    back from its JSON) what its finding says."""
    known = {r.id: r for r in rules}
    by_finding = {f["rule_id"]: f for f in findings}
    out = []
    for rid in rule_ids:
        r, f = known.get(rid), by_finding.get(rid, {})
        name = r.name if r else f.get("name", rid)
        severity = r.severity if r else f.get("severity", "warning")
        summary = " ".join((r.summary if r else f.get("message", name)).split())
        d = {"id": rid, "name": name,
             "shortDescription": {"text": summary.split(". ")[0].rstrip(".") + "."},
             "fullDescription": {"text": " ".join((r.why if r else summary).split())},
             "help": {"text": " ".join((r.fix if r else f.get("fix", "")).split()) or name},
             "defaultConfiguration": {"level": LEVELS.get(severity, "warning")},
             "properties": {"tags": ["performance", *(list(r.groups) if r else f.get("groups", []))]}}
        if r and r.references:
            d["helpUri"] = r.references[0]
        out.append(d)
    return out


def _source_index(top_ops: list[dict]) -> dict:
    """(module, op) and op -> (source_file, source_line), for ops whose HLO metadata names a source line."""
    idx: dict = {}
    for o in top_ops:
        if o.get("source_file") and (o.get("source_line") or 0) > 0:
            loc = (o["source_file"], int(o["source_line"]))
            idx.setdefault((o.get("module"), o.get("op")), loc)
            idx.setdefault((None, o.get("op")), loc)
    return idx


def _locations(f: dict, idx: dict, trace_uri: str, root: str | None) -> tuple[list, list]:
    """(primary locations, related locations) of a finding."""
    seen, locs = [], []
    for row in f.get("evidence") or []:
        op = row.get("op")
        if not op:
            continue
        src = idx.get((row.get("module"), op)) or idx.get((None, op))
        if src and src not in seen:
            seen.append(src)
            locs.append((src, op, row.get("module")))
    out = []
    for (file, line), op, module in locs[: RELATED + 1]:
        loc = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(file, root)},
                                    "region": {"startLine": line}},
               "logicalLocations": [{"name": op, "kind": "function",
                                     **({"fullyQualifiedName": f"{module}/{op}"} if module else {})}]}
        out.append(loc)
    if not out:
        primary = {"physicalLocation": {"artifactLocation": {"uri": trace_uri}}}
        op = next((r.get("op") for r in f.get("evidence") or [] if r.get("op")), None)
        if op:
            primary["logicalLocations"] = [{"name": op, "kind": "function"}]
        return [primary], []
    related = [dict(loc, id=i, message={"text": f"also: {loc['logicalLocations'][0]['name']}"})
               for i, loc in enumerate(out[1:], 1)]
    return out[:1], related


def build(report, root: str | None = None) -> dict:
    """The SARIF log as a dict."""
    d = report.data if hasattr(report, "data") else report
    findings = d.get("findings") or []
    ran = list((d.get("params") or {}).get("rules") or {})
    rule_ids = sorted(set(ran) | {f["rule_id"] for f in findings})
    rules = _rule_meta(rule_ids, findings, getattr(report, "rules", ()))
    index = {r["id"]: i for i, r in enumerate(rules)}
    inputs = d.get("inputs") or []
    trace_uri = artifact_uri(inputs[0]["path"], root) if inputs else "trace"
    idx = _source_index(d.get("top_ops") or [])
    results = []
    for f in findings:
        locs, related = _locations(f, idx, trace_uri, root)
        first = locs[0]["physicalLocation"]
        key = "|".join([f["rule_id"], first["artifactLocation"]["uri"],
                        str(first.get("region", {}).get("startLine", "")),
                        (locs[0].get("logicalLocations") or [{}])[0].get("name", "")])
        res = {"ruleId": f["rule_id"], "ruleIndex": index[f["rule_id"]],
               "level": LEVELS.get(f.get("severity"), "warning"),
               "message": {"text": f"{f['message']} Fix: {f['fix']}"},
               "locations": locs,
               "partialFingerprints": {"tracekitFinding/v1": hashlib.sha256(key.encode()).hexdigest()[:32]},
               "properties": {k: f.get(k) for k in ("savings_ps", "claimed_ps", "share", "evidence_count", "params",
                                                    "severity") if f.get(k) is not None}}
        if related:
            res["relatedLocations"] = related
        results.append(res)
    s = d.get("summary") or {}
    run = {"tool": {"driver": {"name": "tracekit", "version": str(d["tool"]["version"]),
                               "semanticVersion": str(d["tool"]["version"]), "rules": rules}},
           "results": results,
           "artifacts": [{"location": {"uri": artifact_uri(i["path"], root)}, "roles": ["analysisTarget"]}
                         for i in inputs],
           "columnKind": "unicodeCodePoints",
           # what makes the numbers less trustworthy (trace oddities, model warnings: ops above their roofline)
           "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": [
               {"level": "warning", "message": {"text": w}} for w in d.get("warnings") or []]}],
           "properties": {"report_schema": d.get("schema"),
                          **{k: s[k] for k in ("profiled_ps", "busy_ps", "idle_ps", "roofline_coverage",
                                               "claimed_savings_ps") if k in s}}}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render(report, *, root: str | None = None, **_) -> str:
    from tracekit.report import jsontext
    return jsontext.dumps(build(report, root)) + "\n"
