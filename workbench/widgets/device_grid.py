"""A picture of the device mesh (data × fsdp × tensor) and of how each kind of weight is split.

The rules are the workbench's logical sharding rules (DESIGN.md): embedding dims over
``fsdp``; heads, kv-heads, MLP and vocabulary over ``tensor``; the batch over ``data × fsdp``;
LoRA factors follow the weight they adapt. Problems the engine reports (a dim that does not
divide) are listed under the picture.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.widget import Widget

AXIS_STYLE = ("cyan", "magenta", "yellow", "green", "blue", "red")

WEIGHT_RULES = (
    ("embedding", "vocab", "embed"),
    ("q k v o", "heads", "embed"),
    ("gate up down", "mlp", "embed"),
    ("norms", "", ""),
)


def split_text(dim_tensor: str, dim_fsdp: str, fsdp: int, tensor: int) -> str:
    parts = []
    if dim_tensor and tensor > 1:
        parts.append(f"{dim_tensor}/{tensor} (tensor)")
    if dim_fsdp and fsdp > 1:
        parts.append(f"{dim_fsdp}/{fsdp} (fsdp)")
    return ", ".join(parts) if parts else "replicated"


class DeviceGrid(Widget):
    DEFAULT_CLASSES = "device-grid"

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.device_count = 0
        self.shape: tuple[int, int, int] = (1, 1, 1)
        self.kind = ""
        self.problems: list[str] = []

    def show(self, device_count: int, shape: tuple[int, int, int], kind: str = "",
             problems: list[str] | None = None) -> None:
        self.device_count, self.shape, self.kind = device_count, shape, kind
        self.problems = list(problems or [])
        self.refresh(layout=True)

    @property
    def valid(self) -> bool:
        d, f, t = self.shape
        return d * f * t == self.device_count and min(self.shape) >= 1

    def mismatch(self) -> str:
        """Why the shape does not fit the devices, in words (a -1 axis fills what is left)."""
        n, sizes = self.device_count, self.shape
        shape = "×".join(str(v) for v in sizes)
        if -1 in sizes:
            known = math.prod(v for v in sizes if v != -1)
            if known < 1:
                return f"{shape}: sizes must be ≥ 1 (or -1 on one axis, to fill)"
            return (f"{shape}: the -1 axis cannot fill {n} device{'s' * (n != 1)}: {n} is not a multiple of "
                    f"{known}")
        return f"{shape} = {sizes[0] * sizes[1] * sizes[2]}, need {n}"

    def get_content_height(self, container, viewport, width: int) -> int:
        d, f, _ = self.shape
        rows = min(d * f, 8) if self.valid else 1
        return 2 + rows + 1 + len(WEIGHT_RULES) + 1 + len(self.problems)

    def render(self) -> Text:
        d, f, t = self.shape
        text = Text(no_wrap=True, overflow="ellipsis")
        kind = f" {self.kind}" if self.kind else ""
        plural = "s" if self.device_count != 1 else ""
        text.append(f"{self.device_count}{kind} device{plural} · mesh data×fsdp×tensor = "
                    f"{d}×{f}×{t}\n",
                    style="bold")
        if not self.valid:
            text.append(f"✗ {self.mismatch()}\n", style="bold red")
        else:
            text.append("            tensor →\n", style="dim")
            rows = d * f
            for r in range(min(rows, 8)):
                di, fi = divmod(r, f)
                text.append(f"d{di} f{fi}".ljust(12), style=AXIS_STYLE[di % len(AXIS_STYLE)])
                for c in range(min(t, 8)):
                    text.append(f"[{r * t + c:>2}]", style=AXIS_STYLE[di % len(AXIS_STYLE)])
                if t > 8:
                    text.append(f" …{t - 8} more")
                text.append("\n")
            if rows > 8:
                text.append(f"… {rows - 8} more rows\n", style="dim")
        text.append("weights split:\n", style="bold")
        for name, dt, dfs in WEIGHT_RULES:
            text.append(f"  {name:<13}", style="bold")
            text.append(split_text(dt, dfs, f, t) + "\n")
        text.append(f"  {'batch':<13}", style="bold")
        text.append(f"over data×fsdp ({d * f}-way); LoRA A/B as their weight")
        for p in self.problems:
            text.append(f"\n⚠ {p}", style="yellow")
        return text
