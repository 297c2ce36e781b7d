"""The one exception tracekit raises for bad input, and the CLI's exit codes.

Every failure a user can cause (a path that does not exist, a file that is not a trace, a truncated or corrupt
trace, an unknown chip name, a bad option value) raises :class:`TraceError` with a one-line message that says
what went wrong, where, and what to do. The CLI prints that line on stderr and exits with ``EXIT_BAD_INPUT``.
"""
from __future__ import annotations

#: Exit codes of the ``tracekit`` command (documented in the README's Troubleshooting and docs/commands.md).
EXIT_OK = 0  #: analysis done; no finding reached ``--fail-on``
EXIT_FINDINGS = 1  #: a finding reached ``--fail-on`` severity (or ``diff`` found a regression)
EXIT_BAD_INPUT = 2  #: bad input or usage: the message says what and where
EXIT_INTERRUPTED = 130  #: stopped by SIGINT (Ctrl-C): 128 + 2, the shell's convention; nothing partial is left


class TraceError(Exception):
    """Bad input: the message is one line saying what, where, and what to do."""

    def __init__(self, what: str, where: str | None = None, hint: str | None = None):
        self.what, self.where, self.hint = what, where, hint
        parts = [what if where is None else f"{where}: {what}"]
        if hint:
            parts.append(hint)
        super().__init__(" — ".join(parts).replace("\n", " "))


class FindingsError(Exception):
    """Raised by ``tracekit.profile(fail_on=...)`` when training has ended (``close()`` / the end of the ``with``
    block) and a finding reached the ``fail_on`` severity. Never raised mid-step, never without ``fail_on``.

    ``findings`` lists the findings that reached it (dicts as in the JSON report), ``report_path`` the JSON report
    (None when it was not written), ``report`` the :class:`~tracekit.report.envelope.Report` when it could be read back."""

    def __init__(self, message: str, findings=(), report_path: str | None = None, report=None):
        super().__init__(message)
        self.findings, self.report_path, self.report = list(findings), report_path, report
