"""Search every transcript (`F`): the children whose transcripts match, each with its first
matching line; enter opens that transcript at the line (`HitScreen`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from flightdeck.engine.attached.search import (
    Found,
    PatternError,
    compile_pattern,
    lines_around,
    search,
)
from flightdeck.engine.model import ChildRow
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets.lists import Rows
from flightdeck.tui.widgets.transcript import TranscriptHighlighter, wrap_line
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Checkbox, Footer, Input, Label, OptionList
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState


class SearchScreen(Screen[None]):
    """A pattern, searched for in every child's transcript; one result per matching child."""

    CSS_PATH = "search.tcss"
    AUTO_FOCUS = "#search-pattern"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="search.close", tooltip="Back to the children"),
        Binding(
            "ctrl+r",
            "toggle_regex",
            "Regex",
            id="search.regex",
            tooltip="Search with a Python regex over each whole line, or for words",
        ),
    ]

    def __init__(self, view: EngineView, *, cursor_blink: bool = True) -> None:
        super().__init__()
        self._view = view
        self.cursor_blink = cursor_blink
        self.found: list[Found] = []
        self._searching: Worker[list[Found]] | None = None
        self._width = 0  # the width the results were folded to

    def compose(self) -> ComposeResult:
        yield Label(Text("Search every transcript", style="bold"), id="search-title")
        with Horizontal(id="search-bar"):
            pattern = Input(
                placeholder="words (from the start of a word), enter", id="search-pattern"
            )
            pattern.cursor_blink = self.cursor_blink
            yield pattern
            yield Checkbox("regex", id="search-regex")
        yield Label("", id="search-status")
        yield Rows(id="search-results")
        yield Footer()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.run_search()

    def action_toggle_regex(self) -> None:
        box = self.query_one("#search-regex", Checkbox)
        box.value = not box.value

    def run_search(self) -> None:
        """Search for the pattern typed (in a thread: a big batch's files may be read)."""
        text = self.query_one("#search-pattern", Input).value
        regex = self.query_one("#search-regex", Checkbox).value
        try:
            pattern = compile_pattern(text, regex=regex)
        except PatternError as exc:
            self._status(str(exc), "red")
            return
        self._status(f"searching for {one_line(text, 60)!r}…", "dim")
        self._searching = self._search(pattern, list(self._view.snapshot().children))

    @work(thread=True, exclusive=True, exit_on_error=False, group="search", description="search")
    def _search(self, pattern: object, rows: list[ChildRow]) -> list[Found]:
        return list(search(rows, pattern, first_only=True))  # type: ignore[arg-type]

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Other errors are the app's one handler's to show; here a result is applied, and a
        # pattern the search gave up on (too slow on a line) is said as a bad one typed is.
        if event.worker is not self._searching:
            return
        if event.state is WorkerState.ERROR and isinstance(event.worker.error, PatternError):
            event.stop()
            self._searching = None
            self._status(str(event.worker.error), "red")
            return
        if event.state is not WorkerState.SUCCESS:
            return
        self._searching = None
        found = event.worker.result
        self.found = list(found) if isinstance(found, list) else []
        results = self.query_one("#search-results", OptionList)
        self._fill(results)
        n = len(self.found)
        if n:
            self._status(f"{n} {'child matches' if n == 1 else 'children match'}; enter opens")
            results.highlighted = 0
            results.focus()
        else:
            self._status("no child's transcript matches", "yellow")

    def _fill(self, results: OptionList) -> None:
        """A result per child, folded to the list's width."""
        width = self._width = text_width(results)
        highlighted = results.highlighted
        results.clear_options()
        results.add_options(
            Option(_result_text(f, width), id=str(i)) for i, f in enumerate(self.found)
        )
        results.highlighted = highlighted

    def on_resize(self) -> None:
        self.call_after_refresh(self._refill)  # once the list has its new width

    def _refill(self) -> None:
        results = self.query_one("#search-results", OptionList)
        if self.found and text_width(results) != self._width:
            self._fill(results)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        index = int(event.option.id or 0)
        if 0 <= index < len(self.found):
            self.app.push_screen(HitScreen(self.found[index]))

    def action_close(self) -> None:
        self.dismiss(None)

    def _status(self, text: str, style: str = "") -> None:
        self.query_one("#search-status", Label).update(Text(text, style=style))


def _result_text(found: Found, width: int) -> Text:
    """A result: the child, the time and its first matching line (plain text: untrusted),
    folded as the transcript pane folds a line, under its text."""
    child, stamp = f"{one_line(found.child_id, 40)}  ", f"{found.stamp}  "
    role = f"{found.role} │ " if found.role else ""
    head = child + stamp + role
    parts = wrap_line(head + one_line(found.text, 300), width, len(head) if role else None)
    first = Text(parts[0])
    first.stylize("bold", 0, len(child))
    first.stylize("dim", len(child), len(head))
    return Text("\n").join([first, *map(Text, parts[1:])])


def text_width(options: OptionList) -> int:
    """The width an option's text is drawn in (0 before the list is laid out)."""
    padding = options.get_component_styles("option-list--option").padding.width
    return max(0, options.scrollable_content_region.width - padding)


class HitScreen(Screen[None]):
    """A child's transcript opened at one line: the lines around it, that line highlighted."""

    CSS_PATH = "search.tcss"
    AUTO_FOCUS = "#hit-lines"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back", id="hit.close", tooltip="Back to the results"),
    ]

    def __init__(self, found: Found) -> None:
        super().__init__()
        self.found = found
        self.at: int | None = None  # the line's index among those shown, once read
        self._lines: list[str] = []  # those shown, as read: folded again to a new width
        self._width = 0  # the width they were folded to

    def compose(self) -> ComposeResult:
        yield Label(self._title(), id="hit-title")
        yield OptionList(id="hit-lines")
        yield Footer()

    def on_mount(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="hit", description="read")
    def _read(self) -> None:
        around = lines_around(self.found.path, self.found.offset)
        self.app.call_from_thread(self._show, around.lines, around.at, around.cut_before)

    def _show(self, lines: Sequence[str], at: int, cut_before: bool) -> None:
        self._lines = list(lines)
        if cut_before:
            self.query_one("#hit-title", Label).update(self._title(cut_before=True))
        self.at = at
        self._fold()
        shown = self.query_one("#hit-lines", OptionList)
        shown.highlighted = at
        shown.scroll_to_highlight(top=False)

    def _fold(self) -> None:
        """Each line an option, folded as the transcript pane folds it (continuing under its
        text column, not at column 0 as the option list would wrap it)."""
        shown = self.query_one("#hit-lines", OptionList)
        width = self._width = text_width(shown)
        highlighter = TranscriptHighlighter()  # a line at a time, as the pane's Log does
        highlighted = shown.highlighted
        shown.clear_options()
        shown.add_options(
            Text("\n").join(highlighter(Text(part)) for part in wrap_line(line, width))
            for line in self._lines
        )
        shown.highlighted = highlighted

    def on_resize(self) -> None:
        self.call_after_refresh(self._refold)  # once the list has its new width

    def _refold(self) -> None:
        if (
            self.at is not None
            and text_width(self.query_one("#hit-lines", OptionList)) != self._width
        ):
            self._fold()

    def _title(self, *, cut_before: bool = False) -> Text:
        title = Text(f"{one_line(self.found.child_id, 60)}  ", style="bold")
        title.append(one_line(self.found.path.name, 60), style="dim")
        if cut_before:
            title.append("  ⋯ earlier lines left out", style="yellow")
        return title

    @property
    def line(self) -> str | None:
        """The highlighted line (for tests)."""
        index = self.query_one("#hit-lines", OptionList).highlighted
        return None if index is None else self._lines[index]

    def action_close(self) -> None:
        self.dismiss(None)
