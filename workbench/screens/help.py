"""Help: every key of every screen (read from the bindings themselves) and the main flow."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from workbench.widgets.nav import NavBar

FLOW = """[b]Main flow[/b]
  1  Models: enter picks a model for Configure (it brings that model's defaults)
  2  Configure → check the mesh and LoRA fields → ctrl+l launches the run;
     ctrl+o enter opens a config file (the picked model's example is offered)
  3  Train: live loss, learning rate, grad norm, tokens/s · s stops (a checkpoint is kept)
  4  Compare: the prompt has the focus: type, enter (or ctrl+r) streams base | tuned
     side by side; \\[ and ] (outside the prompt) walk earlier compares of the run
  5  Runs: space marks runs to overlay, w then enter relaunches with twice the rank
  q  quits the TUI; runs keep going in the engine, reopen to reattach
  ctrl+p opens the command palette (every action)
  In a text field every key types (digits, ?, q too); escape leaves the field
"""


def binding_table(app_bindings: list) -> str:
    """Every screen's keys, the app's (``app_bindings``: the running app's) first."""
    from workbench.screens import compare, configure, models, runs, train
    from workbench.screens.base import WorkbenchScreen

    sections = [("app (everywhere)", app_bindings),
                ("text fields (every screen)", WorkbenchScreen.BINDINGS)]
    for module in (models, configure, train, compare, runs):
        sections.append((module.SCREEN.__name__.removesuffix("Screen"), module.SCREEN.BINDINGS))
    lines = []
    for title, bindings in sections:
        lines.append(f"[b]{title}[/b]")
        for b in bindings:
            if isinstance(b, Binding):
                key = b.key_display or b.key.replace(",", " / ")
                cells = f"{key:<18} {b.description:<18}".replace("[", r"\[")
                lines.append(f"  {cells} [dim]{b.id}[/]")
    return "\n".join(lines)


class HelpScreen(Screen):
    BINDINGS = [Binding("escape", "app.show('models')", "Back", id="help.back")]

    def __init__(self) -> None:
        super().__init__(name="help")

    def compose(self) -> ComposeResult:
        yield NavBar("help")
        with VerticalScroll(id="help-body"):
            yield Static(FLOW, id="help-flow")
            yield Static(binding_table(type(self.app).BINDINGS), id="help-keys")
        yield Footer()


SCREEN = HelpScreen
