"""The limits dialog (`L`: the pool size, each route's caps, the soft budget, editable) and the
soft budget's question when its hold begins (raise it, continue without it, or stop all)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from flightdeck.engine.commands import (
    CommandError,
    LimitError,
    parse_count,
    parse_money,
)
from flightdeck.engine.model import Limits
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.screens.dialogs import DialogBox
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

# What each field is called in the dialog (its errors name it so).
_LABELS = {
    "pool_size": "pool size",
    "route": "route",
    "max_concurrent": "max_concurrent",
    "rpm": "rpm",
    "tpm": "tpm",
    "soft_cost_usd": "soft budget",
    "limits": "limits",
}


def _shown(value: object) -> str:
    return "off" if value is None else str(value)


def _field_id(route_index: int, field: str) -> str:
    # Widget ids from a position, not the route's name: a name may hold any character.
    return f"limit-r{route_index}-{field.replace('_', '-')}"


# Sends the change (SetLimits): CommandError (a LimitError naming the field) for a bad one.
Apply = Callable[[dict[str, Any]], None]


class LimitsDialog(ModalScreen[dict[str, Any] | None]):
    """The live limits as they stand, editable; Apply hands `apply` (a SetLimits sent)
    the fields the operator changed and closes with them; a bad one is said in the dialog,
    which stays open."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="dialog.cancel", tooltip="Close, change nothing"),
    ]

    def __init__(self, limits: Limits, apply: Apply, *, held: str | None = None) -> None:
        super().__init__()
        self.limits = limits
        self.apply = apply
        self.held = held

    def compose(self) -> ComposeResult:
        limits = self.limits
        # Scrolls: a batch of many routes has a row for each.
        with DialogBox(classes="dialog"):
            yield Label(Text("Live limits", style="bold"))
            yield Label(
                Text(
                    "Lowering a limit stops nothing: admission waits until under it. "
                    "Type off to remove a route's limit or the soft budget.",
                    style="dim",
                )
            )
            with Horizontal(classes="limit-row"):
                yield Label("pool size", classes="limit-label")
                yield Input(str(limits.pool_size), id="limit-pool")
            for i, caps in enumerate(limits.routes):
                yield Label(Text(f"route {one_line(caps.route, 40)}", style="bold"))
                with Horizontal(classes="limit-row"):
                    for field in caps.fields:
                        yield Label(field, classes="limit-label")
                        yield Input(_shown(getattr(caps, field)), id=_field_id(i, field))
            hard = limits.max_cost_usd
            label = "soft budget in $" + ("" if hard is None else f" (hard budget {fmt_usd(hard)})")
            with Horizontal(classes="limit-row"):
                yield Label(label, classes="limit-label")
                yield Input(_shown(limits.soft_cost_usd), id="limit-soft")
            if self.held:
                yield Label(Text(f"held: {one_line(self.held, 200)}", style="yellow"))
            yield Label("", id="limit-error")
            with Horizontal(classes="buttons"):
                yield Button("Apply", variant="primary", id="apply")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#limit-pool", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "apply":
            self.action_apply()
        else:
            self.action_cancel()

    def change(self) -> dict[str, Any]:
        """What the fields change (LimitError for one that does not parse)."""
        limits = self.limits
        out: dict[str, Any] = {}
        pool = parse_count("pool_size", self._value("#limit-pool"))
        if pool != limits.pool_size:
            out["pool_size"] = pool
        routes: dict[str, dict[str, int | None]] = {}
        for i, caps in enumerate(limits.routes):
            for field in caps.fields:
                value = parse_count(field, self._value(f"#{_field_id(i, field)}"))
                if value != getattr(caps, field):
                    routes.setdefault(caps.route, {})[field] = value
        if routes:
            out["routes"] = routes
        soft = parse_money("soft_cost_usd", self._value("#limit-soft"))
        old = limits.soft_cost_usd
        if (None if soft is None else Decimal(soft)) != old:
            out["soft_cost_usd"] = soft
        return out

    def _value(self, selector: str) -> str:
        return self.query_one(selector, Input).value

    def action_apply(self) -> None:
        try:
            change = self.change()
        except LimitError as exc:
            self._error(exc)
            return
        if not change:
            self.dismiss(None)
            return
        try:
            self.apply(change)
        except CommandError as exc:  # the check: an unknown route, over the hard budget
            self._error(exc)
            return
        self.dismiss(change)

    def _error(self, exc: CommandError) -> None:
        field = exc.field or "limits"
        text = f"{_LABELS.get(field, field)}: {exc.message}"
        self.query_one("#limit-error", Label).update(Text(one_line(text, 300), "red"))

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True, slots=True)
class SoftBudgetAnswer:
    """What the operator chose when the soft budget held (and the dialog has done): raise it to
    `raise_to`, drop it (`raise_to` None, `stop` False), or stop all."""

    raise_to: str | None = None
    stop: bool = False


class SoftBudgetDialog(ModalScreen[SoftBudgetAnswer | None]):
    """The soft budget holds admission: raise it (to a typed value), continue without it, or
    stop all; Escape decides later (the hold stays, `L` can change it)."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Later", id="dialog.cancel", tooltip="Decide later"),
    ]

    def __init__(
        self, held: str, limits: Limits, apply: Apply, stop_all: Callable[[], None]
    ) -> None:
        super().__init__()
        self.held = held
        self.limits = limits
        self.apply = apply
        self.stop_all = stop_all

    def compose(self) -> ComposeResult:
        with DialogBox(classes="dialog"):
            yield Label(Text("Soft budget reached", style="bold"))
            yield Label(Text(one_line(self.held, 300)))
            yield Label(
                Text("No new child starts; the running ones go on. Raise it, continue, or stop.")
            )
            hard = self.limits.max_cost_usd
            hint = "new soft budget in $" + (f" (hard budget {fmt_usd(hard)})" if hard else "")
            yield Input(placeholder=hint, id="soft-raise")
            yield Label("", id="soft-error")
            with Horizontal(classes="buttons"):
                yield Button("Raise", variant="primary", id="raise")
                yield Button("Continue", id="continue")
                yield Button("Stop all", variant="error", id="stop")

    def on_mount(self) -> None:
        self.query_one("#soft-raise", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_raise()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "raise":
            self.action_raise()
        elif event.button.id == "continue":
            self._answer(SoftBudgetAnswer())
        else:
            self.stop_all()
            self.dismiss(SoftBudgetAnswer(stop=True))

    def _answer(self, answer: SoftBudgetAnswer) -> None:
        try:
            self.apply({"soft_cost_usd": answer.raise_to})
        except CommandError as exc:  # over the hard budget, say
            self.show_error(exc)
            return
        self.dismiss(answer)

    def action_raise(self) -> None:
        text = self.query_one("#soft-raise", Input).value
        try:
            value = parse_money("soft_cost_usd", text) if text.strip() else ""
        except LimitError as exc:
            self.show_error(exc)
            return
        if not value:  # empty, or "off": raising needs a value (Continue drops it)
            self.query_one("#soft-error", Label).update(
                Text("Type the new soft budget in dollars, or press Continue.", "red")
            )
            return
        self._answer(SoftBudgetAnswer(raise_to=value))

    def show_error(self, exc: CommandError) -> None:
        self.query_one("#soft-error", Label).update(
            Text(one_line(f"soft budget: {exc.message}", 300), "red")
        )

    def action_cancel(self) -> None:
        self.dismiss(None)
