"""`TabDriver`: Textual's web driver, ending the app once the server has gone."""

from __future__ import annotations

from textual import messages
from textual.drivers.web_driver import WebDriver


class TabDriver(WebDriver):
    """The web driver of one tab's app. Its input is the server's pipe: when that closes
    without a quit (the server was killed), the app ends rather than run on with no reader."""

    def run_input_thread(self) -> None:
        super().run_input_thread()
        if not self.exit_event.is_set():  # not the app's own exit: the server is gone
            self.send_message(messages.ExitApp())
