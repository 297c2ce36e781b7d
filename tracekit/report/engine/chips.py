"""Section ``chips``: the chips the devices ran on (``chips[]``, and the roofline chart's roofs)."""
from __future__ import annotations

NAME = "chips"


def summarize(hv) -> tuple:
    """(ChipUse per chip of the host's devices that ran ops, (host, device) -> Chip of every device)."""
    from tracekit.model import roofline
    return tuple(roofline.chips_used(hv.trace, hv.chips)), dict(hv.chips)


def reduce(parts: list, ctx) -> dict:
    """The chips of the pod in device order (a chip's numbers are those of its first device; devices named
    ``host/device`` when there are several hosts)."""
    from tracekit.model.roofline import ChipUse
    from tracekit.report.envelope import chip_entry
    first: dict = {}
    devs: dict = {}
    many = len(ctx.summaries) > 1
    for s, (uses, dchips) in zip(ctx.summaries, parts):
        ctx.chips.update(dchips)
        for use in uses:
            first.setdefault(use.chip.name, use.chip)
            devs.setdefault(use.chip.name, []).extend(f"{s.host}/{d}" if many else d for d in use.devices)
    uses = [ChipUse(first[n], tuple(d)) for n, d in devs.items()]
    ctx.shared["chip_entries"] = [chip_entry(u) for u in uses]
    return {"chips": ctx.shared["chip_entries"]}
