"""The transcript pane: the selected child's transcript file, tailed live."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from flightdeck.engine.apilight import CONTINUED, SEPARATOR, STAMP_WIDTH, parse
from flightdeck.engine.attached.watch import Waker
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.tail import Chunk, Tail
from flightdeck.tui.widgets.days import Days
from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive, var
from textual.widgets import Log, Static
from textual.worker import Worker, WorkerState

_MIN_BODY = 20  # narrower than this, wrapped lines are not indented
ROLE_STYLES = {
    "system": "dim",
    "user": "bold cyan",
    "assistant": "",
    "tool": "cyan",
    "tool-call": "cyan",
    "operator": "bold magenta",
    "engine": "yellow",
    "error": "bold red",
}
_FINISHED = (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED)
FOLLOWING_PAUSED = "following paused — End to resume"


def wrap_line(line: str, width: int, text_start: int | None = None) -> list[str]:
    """Fold a long transcript line to `width`, continuing under its text column (`text_start`,
    where a line of another shape has its text after a separator: a search result)."""
    if width <= 0 or cell_len(line) <= width:
        return [line]
    if text_start is None:
        parsed = parse(line)
        text_start = None if parsed is None else parsed.text_start
    indent = ""
    if text_start is not None and width - text_start >= _MIN_BODY:
        # continuation lines keep the text column, under the separator
        indent = SEPARATOR.lstrip().rjust(text_start)
    wrapped = textwrap.wrap(
        line, width, subsequent_indent=indent, replace_whitespace=False, drop_whitespace=True
    )
    return wrapped or [line]


class TranscriptHighlighter(Highlighter):
    """Styles a transcript line's stamp and role (an operator or error line's text, a cut reply
    line's mark)."""

    def highlight(self, text: Text) -> None:
        line = parse(text.plain)
        if line is None:
            return
        text.stylize("dim", 0, STAMP_WIDTH)
        style = ROLE_STYLES.get(line.role, "")
        if style:
            text.stylize(style, STAMP_WIDTH, line.text_start - len(SEPARATOR))
        if line.role in ("operator", "error"):
            text.stylize(style, line.text_start)
        if line.continued:  # the reply goes on after the lines that cut it
            text.stylize("dim", len(text) - len(CONTINUED))


class FollowingLog(Log):
    """A Log that keeps its last line in view (`following`) until the operator scrolls up;
    End, or scrolling back down to the end, follows again.

    Textual's Log only scrolls on a write when it was at the end already, so anything that
    moves the end without a write (the pane shrinking as a banner appears, lines folded taller)
    left it short of the end for good. Here `pin` puts it back after writes, resizes and on the
    pane's timer, and only the operator's scrolling up stops it."""

    following: var[bool] = var(True)
    # Textual's virtual_size asks for a layout of the whole screen when it changes, as a Log's
    # does at each write and clear (twice a key that shows another child, about 18 ms of CPU
    # each with the table beside it). Here the box is the pane's whatever the line count, and
    # the vertical scrollbar always shows (Log's overflow-y: scroll): no widget moves, so only
    # the scrollbar and the scroll bounds are brought up to date.
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def watch_virtual_size(self, size: Size) -> None:
        self._scroll_update(size)

    def on_mount(self) -> None:
        self.auto_scroll = False  # `append` decides
        self.watch(self, "scroll_y", self._scrolled, init=False)

    def append(self, lines: list[str]) -> None:
        """Add lines at the end, and keep the end in view while following."""
        self.write_lines(lines, scroll_end=False)
        self.pin()

    def pin(self) -> None:
        """While following, scroll to the end if anything moved it out of view."""
        if self.following and not self.is_vertical_scroll_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def follow(self) -> None:
        """Follow the end again (End, another child shown)."""
        self.following = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)

    def action_scroll_end(self) -> None:
        self.follow()

    def on_resize(self) -> None:
        self.call_after_refresh(self.pin)  # after the layout settles the new height

    def on_mouse_scroll_up(self) -> None:
        # The wheel scrolls the pane without focusing it: focus it, so End (the hint in the
        # title) reaches it rather than moving the table's cursor to its last row.
        if not self.has_focus and self.max_scroll_y:
            self.focus(scroll_visible=False)

    def _scrolled(self, old: float, new: float) -> None:
        # Scrolled up (by the operator: a write or a resize only ever brings the end closer or
        # clamps to it) pauses following; reaching the end again resumes it.
        if self.is_vertical_scroll_end:
            self.following = True
        elif new < old:
            self.following = False


class TranscriptView(Vertical):
    """Shows the last `max_lines` lines of one child's transcript and follows its end as it
    grows: read when watchfiles says the file changed (watch.py, as `logs -f`), and every
    `poll_s` whatever happens."""

    WAKE_EVERY_S = 0.05  # a streaming child writes a line per chunk: read at most this often

    class Changed(Message):
        """The transcript file changed (posted from the watcher thread)."""

    def __init__(
        self,
        *,
        max_lines: int = 2000,
        max_bytes: int = 1 << 20,
        poll_s: float = 0.25,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.poll_s = poll_s
        self.child_id: str | None = None
        self.path: Path | None = None
        self.frozen = False
        self.cut = False  # some earlier lines are not shown
        # The file read so far; replaced on each switch, so a late read of another is dropped.
        self._tail: Tail | None = None
        self._reading: Worker[tuple[Tail, Chunk]] | None = None
        self._wrap_width: int | None = None  # lines on show were folded to this width
        self._days = Days()
        self._waker: Waker | None = None
        self._woken = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="transcript-title", markup=False)
        log = FollowingLog(max_lines=self.max_lines, highlight=True, id="transcript-log")
        log.highlighter = TranscriptHighlighter()
        yield log

    def on_mount(self) -> None:
        self._title()
        self.watch(self.log_widget, "following", self._title, init=False)
        self.set_interval(self.poll_s, self.poll)

    @property
    def log_widget(self) -> FollowingLog:
        return self.query_one("#transcript-log", FollowingLog)

    @property
    def lines(self) -> list[str]:
        """The lines on show (for tests and the screen)."""
        return list(self.log_widget.lines)

    @property
    def following(self) -> bool:
        """Whether the pane keeps the transcript's last line in view."""
        return self.log_widget.following

    def show(self, child_id: str | None, path: Path | None) -> None:
        """Switch to another child's transcript, once the screen has drawn what moved: the
        cursor's move is on screen before this pane empties and fills (a layout each)."""
        if child_id == self.child_id and path == self.path:
            return
        self.child_id, self.path = child_id, path
        self.call_after_refresh(self._switch, child_id, path)

    def _switch(self, child_id: str | None, path: Path | None) -> None:
        if (child_id, path) == (self.child_id, self.path):  # else another switch came since
            self._watch(path)
            self._reload()

    def _watch(self, path: Path | None) -> None:
        if self._waker is not None and path is not None and self._waker.folder == path.parent:
            # Another child of the same batch: the folder's watcher watches its file instead
            # (starting a watcher costs a thread and an inotify set-up, on every row change).
            self._waker.names = frozenset((path.name,))
            return
        if self._waker is not None:
            self._waker.close(wait=False)  # a row move must not wait for its thread
            self._waker = None
        if path is not None and path.parent.is_dir():
            # Its own polling stays the interval timer: the waker only adds the prompt wake-ups.
            self._waker = Waker(path.parent, (path.name,), self._changed, poll_s=3600).start()

    def _changed(self) -> None:
        """Watcher thread: at most one message per WAKE_EVERY_S (post_message is thread-safe)."""
        now = time.monotonic()
        if now - self._woken >= self.WAKE_EVERY_S:
            self._woken = now
            self.post_message(self.Changed())

    def on_transcript_view_changed(self, _: TranscriptView.Changed) -> None:
        self.poll()

    def on_unmount(self) -> None:
        self._watch(None)

    def _width(self) -> int:
        return self.log_widget.scrollable_content_region.width

    def _reload(self) -> None:
        path = self.path
        self._tail = (
            None if path is None else Tail(path, max_lines=self.max_lines, max_bytes=self.max_bytes)
        )
        self._reading = None
        self._wrap_width = None
        self.cut = False
        self.log_widget.clear()
        self.log_widget.follow()
        self._title()
        self.poll()

    def poll(self) -> None:
        """Read what was appended since the last read (in a thread: files may be slow)."""
        self.log_widget.pin()  # whatever moved the end since (a resize, a banner), follow it
        tail = self._tail
        if self.frozen or tail is None or self._reading is not None:
            return
        if self._wrap_width is not None and self._width() != self._wrap_width:
            self._reload()  # the pane was resized: fold the lines again
            return
        if tail.grew():  # else nothing new: no thread for it
            self._reading = self._read(tail)

    @work(
        thread=True,
        exclusive=True,
        exit_on_error=False,
        group="transcript",
        description="read transcript",
    )
    def _read(self, tail: Tail) -> tuple[Tail, Chunk]:
        return tail, tail.read()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Errors are reported by the app's one handler; here only results are applied.
        if event.worker is not self._reading or event.state not in _FINISHED:
            return
        self._reading = None
        if event.state is WorkerState.SUCCESS and event.worker.result is not None:
            tail, chunk = event.worker.result
            if tail is self._tail:
                self._apply(chunk)

    def _apply(self, chunk: Chunk) -> None:
        log = self.log_widget
        if chunk.start is None or chunk.reset:
            log.clear()
            self._days = Days()
        cut = self.cut or chunk.cut
        if chunk.lines:
            width = self._wrap_width = self._width()
            dated = self._days.add(list(chunk.lines), chunk.mtime)
            lines = [part for line in dated for part in wrap_line(line, width)]
            cut = cut or log.line_count + len(lines) > self.max_lines
            log.append(lines)
        if cut != self.cut:
            self.cut = cut
            self._title()

    def _title(self) -> None:
        title = Text("transcript", style="bold")
        if self.child_id is None:
            title.append("  no child selected", style="dim")
        else:
            title.append(f"  {one_line(self.child_id)}", style="bold")
            if self.path is not None:
                title.append(f"  {one_line(self.path.name)}", style="dim")
        if self.cut:
            title.append(f"  ⋯ earlier lines cut (last {self.max_lines:,} shown)", style="yellow")
        if not self.log_widget.following:
            title.append(f"  {FOLLOWING_PAUSED}", style="bold yellow")
        self.query_one("#transcript-title", Static).update(title, layout=False)
