"""The TUI's main flow driven by Textual's Pilot against the real engine, a screen saved at
each step (``scripts/tpu_device.sh check tui`` runs it on a TPU, where tmux cannot hold a
server).

``python -m bench.tui_screens [--out DIR] [--steps N] [--size WxH] [--config TOML] [--set KEY=VALUE
...] [--prompt TEXT]``: the app as
``gemma-workbench`` opens it (its own client: the engine started detached on first use, or
the one that answers), then Models → Configure (the demo's config, the fit bar against the
device's memory; ``--config``/``--set``: another run, e.g. the Keras route's IMDB example) →
launch → Train (live loss) → Compare (base and tuned streaming) → Runs → export the adapter; each step's screen as ``DIR/NN-name.svg``, and ``DIR/tui.log`` with what
each step saw and how long it waited. The engine is stopped at the end (it holds the chip).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from bench.outdir import default_out


async def until(pilot, condition, what: str, timeout: float = 600.0) -> float:
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(0.25)
    return time.monotonic() - t0


async def drive(out: Path, steps: int, size: tuple[int, int], config: str = "examples/demo.toml",
                overrides: tuple[str, ...] = (), prompt_text: str = "Is 17 even or odd?") -> list[str]:
    from textual.widgets import Input

    from adapters_lib.config.model_defaults import load_with_model_defaults
    from workbench.app import WorkbenchApp
    from workbench.widgets.plot import PlotView

    sets = (*overrides, f"train.steps={steps}", f"train.eval_every={steps}", f"train.checkpoint_every={steps}")
    defaults = load_with_model_defaults(config, sets).config
    app = WorkbenchApp(mode="models", defaults=defaults, remember=False)
    log: list[str] = []
    n = [0]

    def shot(name: str, note: str) -> None:
        n[0] += 1
        path = out / f"{n[0]:02d}-{name}.svg"
        app.save_screenshot(filename=path.name, path=str(out))
        log.append(f"{path.name}: {note}")
        print(f"[tui] {path.name}: {note}", file=sys.stderr, flush=True)

    async with app.run_test(size=size) as pilot:
        w = await until(pilot, lambda: bool(app.engine_phase.ready), "the engine", timeout=300)
        shot("models", f"engine ready after {w:.1f} s")
        await pilot.press("2")
        w = await until(pilot, lambda: getattr(app.screen, "device_count", 0) > 0
                        and not app.screen.query_one("#launch").disabled, "Configure valid")
        await pilot.pause(1.0)  # the estimate's fit bar
        backend = app.screen.config.model.backend if app.screen.config else "?"
        shot("configure", f"devices {app.screen.device_count}, launch enabled after {w:.1f} s; "
             f"backend {backend}")
        if backend != "gemma":  # the route is in the config's TOML (its [model] table)
            from textual.widgets import TabbedContent

            app.screen.query_one("#configure-tabs", TabbedContent).active = "tab-toml"
            await pilot.pause(0.5)
            shot("configure-toml", f"the TOML page: model.backend = {backend!r}")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: app.current_mode == "train" and app.screen.query("#plot-loss"), "Train")
        plot = app.screen.query_one("#plot-loss", PlotView)
        w = await until(pilot, lambda: plot.point_count() >= 3, "3 loss points")
        shot("train-live", f"{plot.point_count()} loss points after {w:.1f} s")
        w = await until(pilot, lambda: getattr(app.screen.view, "state", "") in ("completed", "failed", "stopped"),
                        "the run's end")
        await pilot.pause(1.0)
        shot("train-done", f"run {app.current_run} {app.screen.view.state} after {w:.1f} s more")
        await pilot.press("4")
        await until(pilot, lambda: app.current_mode == "compare" and app.screen.view is not None, "Compare")
        app.screen.query_one("#compare-max-new-tokens", Input).value = "24"
        prompt = app.screen.query_one("#compare-prompt", Input)
        prompt.value = prompt_text
        prompt.focus()
        await pilot.press("enter")
        w = await until(pilot, lambda: app.screen.summary is not None, "the compare's end")
        shot("compare", f"tokens {app.screen.summary.tokens} after {w:.1f} s")
        await pilot.press("escape")
        await pilot.press("5")
        await until(pilot, lambda: app.current_mode == "runs" and app.screen.runs, "Runs")
        await pilot.pause(1.0)
        shot("runs", f"{len(app.screen.runs)} run(s)")
        await pilot.press("e")
        await pilot.pause(3.0)
        shot("export-dialog", "after 'e': the export formats")
        await pilot.press("enter")
        await pilot.pause(5.0)
        shot("exported", "after 'enter': the first format exported")
        client = app.client
    try:
        client.shutdown()
    except Exception as e:  # noqa: BLE001
        log.append(f"engine stop: {e}")
    return log


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tui_screens", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=default_out("tui_screens"))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--size", default="100x30")
    p.add_argument("--config", default="examples/demo.toml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--prompt", default="Is 17 even or odd?", help="the Compare screen's prompt")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    w, h = (int(x) for x in a.size.split("x"))
    t = time.monotonic()
    try:
        log = asyncio.run(drive(out, a.steps, (w, h), a.config, tuple(a.set), a.prompt))
        ok = True
    except Exception as e:  # noqa: BLE001 - the screens so far are kept
        log, ok = [f"FAILED: {type(e).__name__}: {e}"], False
    (out / "tui.log").write_text("\n".join(log) + f"\n{time.monotonic() - t:.0f} s\n", encoding="utf-8")
    print("\n".join(log))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
