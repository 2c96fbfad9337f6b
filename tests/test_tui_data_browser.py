"""Configure's data browser (ctrl+b): the datasets of ``data list`` with their details, a
preview through the engine, and enter putting the name in [data] path."""

from __future__ import annotations

import pytest
from fixtures_tui import StaticClient
from textual.widgets import DataTable, Input, Static
from textual.worker import WorkerCancelled

from workbench.app import WorkbenchApp

pytestmark = pytest.mark.anyio


async def workers_done(pilot) -> None:
    try:
        await pilot.app.workers.wait_for_complete()
    except WorkerCancelled:  # an exclusive worker replaced by a newer one (the estimate)
        pass


async def settle(pilot) -> None:
    await workers_done(pilot)
    await pilot.pause(0.3)
    await workers_done(pilot)
    await pilot.pause()


async def test_browse_data_lists_the_cache_shows_labels_and_enter_sets_the_path(
        dataset_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no-tfds"))
    monkeypatch.setenv("GEMMA_WORKBENCH_HOME", str(tmp_path / "home"))
    (tmp_path / "qa.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    app = WorkbenchApp(StaticClient(), mode="configure", remember=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")  # from inside the first field
        await settle(pilot)
        table = app.screen.query_one("#data-list", DataTable)
        names = [table.get_row_at(i)[0] for i in range(table.row_count)]
        assert names == ["hf:imdb", str(tmp_path / "qa.jsonl")]
        detail = str(app.screen.query_one("#data-detail", Static).render())
        assert "train 40, test 10" in detail and "set [data] labels" in detail and "(neg/pos)" in detail
        await pilot.press("p")
        await settle(pilot)
        assert "data looks good" in str(app.screen.query_one("#data-preview", Static).render())
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen.query_one("#f-data-path", Input).value == "hf:imdb"
