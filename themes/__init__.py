"""Textual themes and styles for the workbench TUI.

``THEMES`` holds the two themes the app registers (``workbench-dark``, ``workbench-light``);
``STYLES`` lists the ``.tcss`` files the app loads (``CSS_PATH``). Nothing here imports the
app: the package is data plus a few ``Theme`` objects.
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

HERE = Path(__file__).resolve().parent
STYLES = [HERE / "app.tcss", HERE / "screens.tcss"]

WORKBENCH_DARK = Theme(
    name="workbench-dark",
    primary="#4C8DF6",
    secondary="#7AA2F7",
    accent="#F4B400",
    warning="#F4B400",
    error="#E5534B",
    success="#3FB950",
    foreground="#D8DEE9",
    background="#11151C",
    surface="#1A202A",
    panel="#232B38",
    dark=True,
)

WORKBENCH_LIGHT = Theme(
    name="workbench-light",
    primary="#1A5FD0",
    secondary="#3F6FBF",
    accent="#B06D00",
    warning="#B06D00",
    error="#C0362C",
    success="#1F7A35",
    foreground="#1F2328",
    background="#F7F8FA",
    surface="#FFFFFF",
    panel="#E6EAF0",
    dark=False,
)

THEMES = (WORKBENCH_DARK, WORKBENCH_LIGHT)
DEFAULT_THEME = WORKBENCH_DARK.name
