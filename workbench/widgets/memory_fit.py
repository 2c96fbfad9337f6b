"""The memory-fit bar: per device, the estimated bytes against its capacity.

Verdicts (the same words the engine's estimate uses): ``fits`` below 85 % of capacity,
``tight`` up to 100 %, ``exceeds`` above. Devices with the same estimate share one row
(``×8``), so a 256-chip slice still fits on a screen.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from adapters_lib.engine import api

TIGHT_AT = 0.85
MAX_ROWS = 2
STYLE = {"fits": "bold green", "tight": "bold yellow", "exceeds": "bold red", "unknown": "dim"}


@dataclass(frozen=True)
class DeviceFit:
    name: str
    used: int
    capacity: int | None
    verdict: str = ""

    @property
    def fraction(self) -> float | None:
        return self.used / self.capacity if self.capacity else None

    @property
    def status(self) -> str:
        if self.verdict in STYLE:
            return self.verdict
        f = self.fraction
        if f is None:
            return "unknown"
        return "fits" if f < TIGHT_AT else "tight" if f <= 1.0 else "exceeds"


def gib(n: float | None) -> str:
    if n is None:
        return "?"
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB"


def fits_from_estimate(devices: list[api.DeviceFit]) -> list[DeviceFit]:
    """The per-device rows of an engine estimate (``EstimateReply.devices``)."""
    return [DeviceFit(f"{d.kind}:{d.device}", d.bytes, d.capacity_bytes or None, d.verdict)
            for d in devices]


class MemoryFitBar(Widget):
    """One bar per group of devices with the same estimate."""

    DEFAULT_CLASSES = "memory-fit"

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.fits: list[DeviceFit] = []
        self.note = "estimating…"

    def set_fits(self, fits: list[DeviceFit], note: str = "") -> None:
        self.fits = fits
        self.note = note
        self.refresh(layout=True)

    @property
    def worst(self) -> str:
        order = ["unknown", "fits", "tight", "exceeds"]
        return max((f.status for f in self.fits), key=order.index, default="unknown")

    def groups(self) -> list[tuple[DeviceFit, int]]:
        groups: dict[tuple[int, int | None, str], list[DeviceFit]] = {}
        for f in self.fits:
            groups.setdefault((f.used, f.capacity, f.status), []).append(f)
        return [(members[0], len(members)) for members in groups.values()]

    def render(self) -> Text:
        width = max(self.content_size.width, 30)
        text = Text(overflow="fold")  # the note wraps (at 80 columns it takes two lines)
        groups = self.groups()
        if not groups:
            text.append(f"memory fit: {self.note}", style="dim")
            return text
        label_w = 10
        tail_w = 28
        bar_w = max(8, width - label_w - tail_w)
        for n, (fit, count) in enumerate(groups[:MAX_ROWS]):
            name = fit.name if count == 1 else f"{fit.name} ×{count}"
            frac = fit.fraction
            filled = 0 if frac is None else min(bar_w, round(bar_w * min(frac, 1.0)))
            style = STYLE[fit.status]
            text.append(f"{name[:label_w - 1]:<{label_w}}")
            text.append("█" * filled, style=style)
            text.append("░" * (bar_w - filled), style="dim")
            pct = "" if frac is None else f" {frac * 100:4.0f}%"
            text.append(f"{pct} {gib(fit.used)}/{gib(fit.capacity)} ")
            text.append(fit.status, style=style)
            if n < min(len(groups), MAX_ROWS) - 1:
                text.append("\n")
        if len(groups) == 1 and self.note:
            text.append(f"\n{self.note}", style="dim")
        return text
