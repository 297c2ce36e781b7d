"""The options of an analysis, and every default, in one place.

Every entry point — the command line (``tracekit analyze``, ``capture``), the Python API (``tracekit.analyze``,
:func:`tracekit.pipeline.analyze`), the hook (``tracekit.profile``) and the pod engines (``--jobs``, ``--dask``) —
builds one :class:`Options` and hands it on; the per-host map receives it whole (:meth:`Options.for_worker`), so a
worker analyzes its host exactly as the driver would. No other module gives one of these a default of its own:
a function that takes one either requires it, defaults it to ``None`` ("not given"), or defaults it to the value
here (``DEFAULTS.hidden``); ``tests/test_architecture.py`` checks it.
"""
from __future__ import annotations

from dataclasses import fields, replace

from tracekit.records import record

#: the largest trace (decompressed) read without ``--max-size``: 8 GiB
DEFAULT_MAX_BYTES = 8 << 30
#: the severities ``fail_on`` takes (``never``: the gate never fails)
FAIL_ON = ("never", "info", "warning", "error")
#: what ``model`` may declare (``transformer``: MFU from 6·N·tokens of the shapes the parallelism section recovers)
MODELS = ("transformer",)
#: what ``workload`` may say (None: what the trace shows, :mod:`tracekit.analysis.serving_kind`)
WORKLOADS = ("training", "serving")


@record(frozen=True)
class Options:
    """What an analysis may be told. Frozen and picklable (it travels to the workers); ``params`` is held as sorted
    tuples (give a dict: ``{"TK003": {"min_gap_ps": 10**7}}``), the rule folders and selections as tuples of text."""

    chip: str | None = None  #: the chip name to price the devices as (``tracekit chips``); None: detected
    topology: str | None = None  #: the machine collectives run on (``--topology``); None: the trace's own
    run: str | None = None  #: the run folder under a logdir's ``plugins/profile``; None: the newest
    rules_dirs: tuple = ()  #: rule folders beside the built-in ones (readable on every worker)
    select: tuple = ()  #: only these rules (id, name, id prefix or group)
    ignore: tuple = ()  #: not these rules
    params: tuple = ()  #: ((rule id or name, ((param, value), ...)), ...): ``--param`` overrides
    hidden: float = 0.9  #: a collective at least this share overlapped with compute is hidden
    exposed: float = 0.1  #: ... at most this share overlapped is exposed
    min_gap_ps: int = 0  #: idle gaps shorter than this are not gaps
    max_evidence: int = 10  #: evidence rows kept per finding
    fail_on: str = "never"  #: the severity that fails the gate (:data:`FAIL_ON`)
    max_bytes: int | None = DEFAULT_MAX_BYTES  #: refuse traces larger than this (decompressed); None: the default
    max_events: int | None = None  #: refuse traces with more events; None: no limit
    model_flops_per_step: float | None = None  #: the model's FLOPs of one step (all devices), for MFU
    #: what the model is (:data:`MODELS`), for MFU when neither ``model_flops_per_step`` nor the trace gives the
    #: model's FLOPs; None: not declared (MFU unknown then)
    model: str | None = None
    replay: bool = True  #: findings' savings replayed along the critical path (False: their claims only)
    #: training | serving (``--workload``): what the trace runs; None: what the trace shows (a program writing a KV
    #: cache in place serves)
    workload: str | None = None
    jobs: int = 1  #: worker processes for the hosts of a run folder (0: one per core; 1: this process)
    dask: object = None  #: a Dask scheduler address, ``"local"``, or a ``Client`` (None: no Dask)

    def __post_init__(self):
        s = object.__setattr__
        s(self, "rules_dirs", tuple(str(d) for d in (self.rules_dirs or ())))
        s(self, "select", tuple(self.select or ()))
        s(self, "ignore", tuple(self.ignore or ()))
        p = self.params
        if isinstance(p, dict):
            p = tuple((str(k), tuple(sorted(dict(v).items()))) for k, v in sorted(p.items(), key=lambda kv: str(kv[0])))
        s(self, "params", tuple(p or ()))
        if self.max_bytes is None:
            s(self, "max_bytes", DEFAULT_MAX_BYTES)
        if self.workload is not None and self.workload not in WORKLOADS:
            raise ValueError(f"workload must be one of {', '.join(WORKLOADS)} (or None: what the trace shows), "
                             f"not {self.workload!r}")

    @property
    def params_dict(self) -> dict:
        """``params`` as {rule: {param: value}}."""
        return {k: dict(v) for k, v in self.params}

    def for_worker(self) -> "Options":
        """What a worker is sent: these options without the engine's own (a Dask client does not travel)."""
        return replace(self, dask=None, jobs=DEFAULTS.jobs)

    def to_json(self) -> dict:
        """The options as plain JSON values (what the hook hands its analysis child; no Dask client)."""
        return {f.name: (self.params_dict if f.name == "params" else list(v) if isinstance(v, tuple) else v)
                for f in fields(self) if f.name != "dask" for v in [getattr(self, f.name)]}

    @classmethod
    def from_json(cls, d: dict) -> "Options":
        """The options :meth:`to_json` wrote."""
        return cls(**{k: v for k, v in (d or {}).items() if k in NAMES})

    def timeline(self) -> dict:
        """The timeline's thresholds, as :func:`tracekit.analysis.rule_checks.frames_for_rules` takes them."""
        return {"hidden": self.hidden, "exposed": self.exposed, "min_gap_ps": self.min_gap_ps}


#: every option at its default
DEFAULTS = Options()
#: the names of the options (what :func:`make` accepts)
NAMES = tuple(f.name for f in fields(Options))


def make(options: Options | None = None, **given) -> Options:
    """``options`` (default :data:`DEFAULTS`) with the keywords ``given`` set; a name that is not an option is a
    TypeError, as a wrong keyword argument is."""
    unknown = sorted(set(given) - set(NAMES))
    if unknown:
        raise TypeError(f"unknown option(s): {', '.join(unknown)} (options: {', '.join(NAMES)})")
    base = options if options is not None else DEFAULTS
    return replace(base, **given) if given else base
