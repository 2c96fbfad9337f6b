"""A line plot drawn with plotext 6.1's figure API, sized to the widget.

plotext is imported at the first drawing (it costs ~0.5 s), not at start-up.

plotext 6.1 has no global ``plt.plot``: a figure is cleared, sized, given signals and built
into a string of ANSI text, which Rich turns into a ``Text``. Redrawing is cheap (a few ms
for a 60×15 plot), but callers should still throttle updates (the Train screen redraws at
most twice a second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget


@dataclass(frozen=True)
class Series:
    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    marker: str | None = None
    """A marker for each point (``"◆"``); None: plotext's default."""
    lines: bool = True
    """Join the points (False: points only, for a sparse series such as eval loss)."""


def _finite(xs, ys) -> tuple[list[float], list[float]]:
    px, py = [], []
    for x, y in zip(xs, ys, strict=False):
        if y is None or x is None:
            continue
        y = float(y)
        if math.isfinite(y):
            px.append(float(x))
            py.append(y)
    return px, py


def render_plot(series: list[Series], width: int, height: int, title: str = "") -> str:
    """Build the ANSI text of a plot of ``series`` in ``width``×``height`` cells."""
    import plotext as plt  # ~0.5 s to import: only when the first plot is drawn

    fig = plt.figure
    fig.clear()
    fig.theme("simple")
    fig.plot_size(width, height)
    if title:
        fig.title(title)
    drawn = 0
    top_right = [float("-inf"), float("-inf")]
    for s in series:
        xs, ys = _finite(s.xs, s.ys)
        if not xs:
            continue
        sig = fig.signal(list(xs), list(ys), marker=s.marker) if s.marker else \
            fig.signal(list(xs), list(ys))
        if len(xs) > 1 and s.lines:
            sig.lines()
        if len(series) > 1:
            sig.label(s.label)
        fig.draw(sig)
        drawn += 1
        top_right = [max(top_right[0], max(xs)), max(top_right[1], max(ys))]
    if not drawn:
        return ""
    if len(series) > 1:  # top right, where falling curves leave room
        fig.legend(x=top_right[0], y=top_right[1], ha="right", va="top", relative=True)
    return fig.build().string()


class PlotView(Widget):
    """A titled plot of one or more series; ``set_series`` replaces them and redraws."""

    DEFAULT_CLASSES = "plot"

    def __init__(self, title: str = "", *, empty: str = "waiting for data…",
                 id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.title = title
        self.empty = empty
        self._series: list[Series] = []
        self._cache: tuple[tuple[int, int], Text] | None = None

    @property
    def series(self) -> list[Series]:
        return list(self._series)

    def set_series(self, series: list[Series]) -> None:
        self._series = list(series)
        self._cache = None
        self.refresh()

    def point_count(self) -> int:
        return sum(len(s.ys) for s in self._series)

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if width < 20 or height < 5:
            return Text(f"{self.title}: {self.point_count()} points", style="dim")
        if self._cache and self._cache[0] == (width, height):
            return self._cache[1]
        ansi = render_plot(self._series, width, height, self.title)
        text = Text.from_ansi(ansi) if ansi else Text(f"{self.title}\n{self.empty}", style="dim")
        text.no_wrap = True
        self._cache = ((width, height), text)
        return text
