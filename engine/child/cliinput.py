"""The user turns written to Claude Code's stdin (`--input-format stream-json`), and what
became of each.

Each message carries a uuid; with `--replay-user-messages` the CLI answers with
`command_lifecycle` events naming it: queued, started, completed (or cancelled, by an
interrupt). A message that starts once the running turn's model has answered went into that
turn (Claude Code folds it in, and the turn ends with one `result` for both). A new turn takes
every message waiting, joined as one user text: they start one after another before its model
answers, and all went in as that new turn (after an interrupt, when it cut the turn before: an
interrupt leaves what waits queued). The CLI has answered everything once every message sent
has completed or been cancelled: then its input can end.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable

from flightdeck.engine.agents.formats import Lifecycle
from flightdeck.engine.model import SteerReceipt

INTO_TURN = "into the running turn"
NEW_TURN = "as a new turn"
AFTER_INTERRUPT = "as a new turn, the running one interrupted"
_FINAL = ("completed", "cancelled")


def user_turn(text: str, message_id: str) -> str:
    """A user message in Claude Code's stream-json input."""
    message = {"role": "user", "content": text}
    return json.dumps({"type": "user", "message": message, "uuid": message_id}) + "\n"


def interrupt(request_id: str) -> str:
    """The control request that interrupts the running turn (its tools are stopped)."""
    request = {
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "interrupt"},
    }
    return json.dumps(request) + "\n"


class CliInput:
    """Messages sent to one Claude Code process, by uuid, and their states."""

    def __init__(
        self,
        write: Callable[[str], str | None],  # None once written, else why it was not
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        *,
        tag: str | None = None,
    ) -> None:
        self._write = write
        self._new_id = new_id
        # A steer's uuid is its receipt's, under the child's tag: an owner that adopts the
        # process knows the steers its dead owner wrote when the CLI names them, and never
        # writes them again.
        self._tag = tag
        self._expected: dict[str, SteerReceipt] = {}
        self._sent: dict[str, SteerReceipt | None] = {}  # None: the task's own prompt
        self._state: dict[str, str] = {}
        self._interrupted: set[str] = set()  # steers that waited for the turn an interrupt cut
        self._opening = NEW_TURN  # how the running turn's opening messages went in
        self._answered = False  # its model has answered: a message starting now is folded in
        self._results = 0
        self._seen_lifecycle = False

    def prompt(self, text: str) -> str:
        """The first turn's line (the caller writes it, from a thread of its own)."""
        message_id = self._new_id()
        self._sent[message_id] = None
        return user_turn(text, message_id)

    def steer(self, receipt: SteerReceipt) -> str | None:
        """Write a steer (after an interrupt, for --now); None once written, else why not."""
        message_id = self._steer_id(receipt)
        line = user_turn(receipt.message, message_id)
        interrupted: set[str] = set()
        if receipt.now and self.running:
            # One write: the CLI reads the message with the interrupt, and the turn after it
            # takes the message with every one the interrupt found waiting (they stay queued).
            line = interrupt(f"flightdeck-{receipt.id}") + line
            interrupted = {m for m in self._sent if self._state.get(m) in (None, "queued")}
            interrupted.add(message_id)
        if (why_not := self._write(line)) is not None:
            return why_not  # nothing written: no turn was interrupted
        self._interrupted |= interrupted
        self._sent[message_id] = receipt
        return None

    def _steer_id(self, receipt: SteerReceipt) -> str:
        if self._tag is None:
            return self._new_id()
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"flightdeck:{self._tag}:{receipt.id}"))

    def expect(self, receipts: Iterable[SteerReceipt], written: str) -> None:
        """Steers still queued when this process was adopted, and all its dead owner wrote to
        its input (`written`): a steer in it was sent, read by the CLI yet or not (the CLI's
        lifecycle events name it by its uuid as it goes), and is never written again."""
        self._expected = {self._steer_id(r): r for r in receipts}
        for line in written.splitlines():
            try:
                message = json.loads(line)
            except ValueError:  # the last, cut short by the owner's death: not known whole
                continue
            if isinstance(message, dict) and message.get("type") == "user":
                message_id = str(message.get("uuid"))
                self._sent.setdefault(message_id, self._expected.get(message_id))
            elif isinstance(message, dict) and message.get("type") == "control_request":
                # A steer --now's interrupt went with it: its turn is the one after it.
                receipt_id = str(message.get("request_id")).removeprefix("flightdeck-")
                self._interrupted |= {
                    m for m, r in self._expected.items() if str(r.id) == receipt_id
                }

    def written_before(self) -> list[SteerReceipt]:
        """The expected steers written to its input or named by the CLI since last asked: the
        dead owner wrote them (a lifecycle event finds them by their uuid, as it finds steers
        written here)."""
        named = [m for m in self._expected if m in self._sent]
        return [self._expected.pop(m) for m in named]

    def result(self) -> None:
        """A turn ended (its `result`)."""
        self._results += 1

    def model_answered(self) -> None:
        """The running turn's model answered (an API call): it is past its opening."""
        self._answered = True

    def queued(self, event: Lifecycle) -> SteerReceipt | None:
        """The steer `event` says the CLI has read and queued (it starts at the running turn's
        next step, or as a turn of its own); None for any other event."""
        if event.state != "queued":
            return None
        return self._sent.get(event.uuid, self._expected.get(event.uuid))

    def lifecycle(self, event: Lifecycle) -> tuple[SteerReceipt, str] | None:
        """A message's new state; a steer that started, and how, is returned once."""
        self._seen_lifecycle = True
        if event.uuid not in self._sent:
            # A message this process was sent before it was adopted (a dead owner's): it too
            # must be answered before the input ends.
            self._sent[event.uuid] = self._expected.get(event.uuid)
        running = self.running
        self._state[event.uuid] = event.state
        receipt = self._sent[event.uuid]
        if event.state != "started":
            return None
        if not running:  # it opens a turn; the messages starting with it share its how
            self._answered = False
            if receipt is None:  # the task's own turn: a steer joining it goes into it
                self._opening = INTO_TURN
            else:
                self._opening = AFTER_INTERRUPT if event.uuid in self._interrupted else NEW_TURN
        if receipt is None:
            return None
        return receipt, INTO_TURN if self._answered else self._opening

    @property
    def running(self) -> bool:
        """True while a turn runs (a message has started and not ended)."""
        return any(state == "started" for state in self._state.values())

    def answered(self) -> bool:
        """True once the CLI has answered every message it was sent."""
        if not self._seen_lifecycle:  # an older CLI: one result per message
            return self._results >= len(self._sent)
        return all(self._state.get(m) in _FINAL for m in self._sent)

    def unstarted(self) -> list[SteerReceipt]:
        """Steers sent that never started (the CLI ended first)."""
        return [
            r
            for m, r in self._sent.items()
            if r is not None and self._state.get(m) not in ("started", *_FINAL)
        ]
