"""Configure's data: check the form's data (``ctrl+d``: read and tokenize up to 2000 records
in the engine, the report on the Data page) and browse the datasets on this machine
(``ctrl+b``: enter sets ``[data] path``).

A mixin of ``ConfigureScreen``.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.widgets import Input, Static

from adapters_lib.errors import WorkbenchError
from workbench.messages import DataChecked
from workbench.screens.base import error_text
from workbench.screens.configure_form import field_id
from workbench.screens.configure_text import data_report_text
from workbench.widgets.waits import Wait


class ConfigDataMixin:
    """Data check and data browser, for ``ConfigureScreen``."""

    data_wait: Wait | None

    def action_check_data(self) -> None:
        try:
            raw = self.form_dict()
        except WorkbenchError as err:
            self.notify(str(err), severity="error")
            return
        self.data_wait = Wait("checking the data (reads and tokenizes up to 2000 records)")
        self.query_one("#data-report", Static).update(f"[dim]{self.data_wait.what}…[/]")
        self.check_data(raw)

    def key_ctrl_b(self) -> None:
        # a key handler, not a Binding yet: a Binding adds a row to the help screen's snapshots
        self.action_browse_data()

    def action_browse_data(self) -> None:
        """ctrl+b: the datasets on this machine (``screens.data_browser``); enter sets [data] path."""
        from workbench.screens.data_browser import DataBrowserScreen

        try:
            raw = self.form_dict()
        except WorkbenchError:
            raw = {"data": {}}

        def chosen(name: str | None) -> None:
            if name:
                self.query_one(f"#{field_id('data', 'path')}", Input).value = name

        self.app.push_screen(DataBrowserScreen(raw, self.client), chosen)

    @work(thread=True, exclusive=True, group="data")
    def check_data(self, raw: dict[str, Any]) -> None:
        try:
            report = self.client.data_check(raw["data"]["path"], format=raw["data"]["format"],
                                            config=raw, limit=2000)
        except Exception as err:  # noqa: BLE001
            self.post_message(DataChecked(f"[b red]✗[/] {error_text(err)}"))
            return
        self.post_message(DataChecked(data_report_text(report)))

    def on_data_checked(self, message: DataChecked) -> None:
        self.data_wait = None
        self.query_one("#data-report", Static).update(message.text)
