"""The loop detector (engine/child/loops.py) and its settings: each kind of loop, near-same
arguments, clearing on progress, the evidence kept in the events table."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.child.loops import LoopDetector, call_key, workspace_fingerprint
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import LoopSettings, load_settings
from flightdeck.engine.model import Activity, ChildRow, ChildStatus, LoopEvidence, Usage
from flightdeck.engine.records.loops import evidence_from_json, evidence_json

OFF = LoopSettings(repeat_calls=0, stale_turns=0, still_turns=0)


def _turn(d: LoopDetector, *calls: tuple[str, dict[str, object], str], tokens: int = 0) -> bool:
    for name, args, output in calls:
        d.call(name, args, output)
    return d.turn_ended(tokens, None, 100.0)


def test_the_same_call_repeated_n_times_is_a_repeat_loop() -> None:
    d = LoopDetector(LoopSettings(repeat_calls=3, stale_turns=0))
    assert not _turn(d, ("read_file", {"path": "a.py"}, "one"))
    assert not _turn(d, ("read_file", {"path": "a.py"}, "two"))
    assert _turn(d, ("read_file", {"path": "a.py"}, "three"))
    ev = d.evidence
    assert ev is not None and ev.kind == "repeat"
    assert ev.summary == 'read_file {"path": "a.py"} called 3 times with the same arguments'
    assert ev.calls == ('read_file {"path": "a.py"}',) * 3
    assert ev.ts == 100.0


def test_near_same_arguments_differ_only_in_numbers_and_spacing() -> None:
    assert call_key("grep", {"q": "x  y", "line": 10}) == call_key("grep", {"line": 12, "q": "x y"})
    assert call_key("grep", {"q": "x"}) != call_key("grep", {"q": "z"})
    assert call_key("grep", {"q": "x"}) != call_key("find", {"q": "x"})
    d = LoopDetector(LoopSettings(repeat_calls=3, stale_turns=0))
    for offset in (0, 40, 80):  # the same page each time: nothing new
        _turn(d, ("read_file", {"path": "a.py", "offset": offset}, "lines 0-40"))
    ev = d.evidence
    assert ev is not None and ev.kind == "repeat"
    assert ev.summary.endswith("called 3 times with near-same arguments")
    # side by side, each as it was made
    assert ev.calls == tuple(f'read_file {{"offset": {n}, "path": "a.py"}}' for n in (0, 40, 80))


def test_near_same_calls_that_each_bring_something_new_are_work_not_a_loop() -> None:
    d = LoopDetector(LoopSettings(repeat_calls=3, stale_turns=0))
    for offset in (0, 40, 80, 120):  # a file read page by page
        _turn(d, ("read_file", {"path": "a.py", "offset": offset}, f"lines {offset}"))
    assert d.evidence is None
    for _ in range(3):  # the same call again is a loop, whatever it returns
        _turn(d, ("read_file", {"path": "a.py", "offset": 0}, "lines 0"))
    assert d.evidence is not None and d.evidence.summary.endswith("with the same arguments")


def test_a_different_call_clears_a_repeat() -> None:
    d = LoopDetector(LoopSettings(repeat_calls=2, stale_turns=0))
    _turn(d, ("list_dir", {"path": "."}, "a"))
    assert _turn(d, ("list_dir", {"path": "."}, "a"))
    assert d.evidence is not None
    assert _turn(d, ("read_file", {"path": "b.py"}, "b"))  # progress: the flag clears
    assert d.evidence is None


def test_turns_whose_results_were_all_seen_before_are_a_no_output_loop() -> None:
    d = LoopDetector(LoopSettings(repeat_calls=0, stale_turns=2))
    _turn(d, ("read_file", {"path": "a"}, "A"), ("read_file", {"path": "b"}, "B"))
    assert not _turn(d, ("read_file", {"path": "b"}, "B"), ("read_file", {"path": "a"}, "A"))
    assert _turn(d, ("read_file", {"path": "a"}, "A"))
    ev = d.evidence
    assert ev is not None and ev.kind == "no_output"
    assert ev.summary == "tool calls with no new output for 2 turns"
    assert ev.calls == (
        'turn 2: read_file {"path": "b"}; read_file {"path": "a"}',
        'turn 3: read_file {"path": "a"}',
    )
    assert _turn(d, ("read_file", {"path": "c"}, "C"))  # a new result: progress
    assert d.evidence is None


def test_tokens_growing_while_the_workspace_stays_the_same_is_a_no_change_loop(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.py").write_text("x")
    d = LoopDetector(LoopSettings(repeat_calls=0, stale_turns=0, still_turns=2))
    printed = workspace_fingerprint(tmp_path)
    for n, tokens in enumerate((100, 250, 400)):
        d.call("read_file", {"path": f"{n}"}, f"new output {n}")
        d.turn_ended(tokens, printed, 1.0)
    ev = d.evidence
    assert ev is not None and ev.kind == "no_change"
    assert ev.calls == (
        "turn 2: +150 tokens, workspace unchanged",
        "turn 3: +150 tokens, workspace unchanged",
    )
    (tmp_path / "b.py").write_text("a change")
    d.call("write_file", {"path": "b.py"}, "ok")
    assert d.turn_ended(500, workspace_fingerprint(tmp_path), 2.0)
    assert d.evidence is None


def test_the_flag_keeps_its_first_time_and_an_answer_clears_it() -> None:
    d = LoopDetector(LoopSettings(repeat_calls=2, stale_turns=0))
    d.call("x", {}, "1")
    d.turn_ended(0, None, 1.0)
    d.call("x", {}, "2")
    d.turn_ended(0, None, 2.0)
    d.call("x", {}, "3")
    assert not d.turn_ended(0, None, 3.0)  # the same loop: no news
    assert d.evidence is not None and d.evidence.ts == 2.0
    assert d.answered() and d.evidence is None
    assert not d.answered()


def test_after_a_policy_steer_only_what_the_child_does_next_is_evidence_again() -> None:
    d = LoopDetector(LoopSettings(repeat_calls=3, stale_turns=3))
    same = ("list_dir", {"path": "."}, "(empty)")
    for _ in range(3):
        _turn(d, same)
    first = d.evidence
    assert first is not None and first.kind == "repeat"
    d.steered()
    # Two more repeats (and two stale turns) after the steer: the flag stands, nothing new.
    assert not _turn(d, same) and not _turn(d, same)
    assert d.evidence == first and not d.again
    # The third repeat since the steer is fresh evidence, found then.
    assert d.turn_ended(0, None, 200.0) is False  # a turn with no call changes nothing
    d.call(*same)
    assert d.turn_ended(0, None, 300.0) and d.again
    assert d.evidence is not None and d.evidence.ts == 300.0
    # Steered again, a different call is progress: the flag clears, not evidence.
    d.steered()
    assert _turn(d, ("read_file", {"path": "a.py"}, "text")) and d.evidence is None
    assert not d.again


def test_every_check_off_flags_nothing() -> None:
    d = LoopDetector(OFF)
    assert not d.enabled
    for _ in range(10):
        _turn(d, ("x", {}, "same"))
    assert d.evidence is None


def test_evidence_round_trips_through_the_events_table_detail() -> None:
    ev = LoopEvidence("repeat", "x called 3 times", ("x {}", "x {}", "x {}"), 12.5)
    assert evidence_from_json(evidence_json(ev)) == ev
    assert evidence_from_json(evidence_json(None)) is None
    assert evidence_from_json("not json") is None


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flightdeck.toml"
    path.write_text(text)
    return path


def test_loop_settings_and_canned_steers_load(tmp_path: Path) -> None:
    s = load_settings(
        _config(
            tmp_path,
            '[routes.sim]\nprovider = "sim"\n[routes.sim.loops]\nrepeat_calls = 3\n'
            'policy = ["nudge", "steer_now", "stop"]\npolicy_wait_s = 30\n'
            '[steer.canned]\nloop = "Stop: {summary} ({kind}, {id}) {{literal}}"\n',
        )
    )
    assert s.routes["sim"].loops == LoopSettings(
        repeat_calls=3, policy=("nudge", "steer_now", "stop"), policy_wait_s=30.0
    )
    assert s.canned.loop == "Stop: {summary} ({kind}, {id}) {{literal}}"
    assert "You are repeating {summary}." in load_settings(_config(tmp_path, "")).canned.loop


@pytest.mark.parametrize(
    ("text", "line", "field", "says"),
    [
        (
            "[routes.sim.loops]\nrepeat_calls = 1\n",
            2,
            "routes.sim.loops.repeat_calls",
            "at least 2",
        ),
        ("[routes.sim.loops]\nstale_turns = -1\n", 2, "routes.sim.loops.stale_turns", "between"),
        ("[routes.sim.loops]\nrepeats = 3\n", 2, "routes.sim.loops.repeats", "unknown key"),
        (
            '[routes.sim.loops]\npolicy = ["nudge", "shout"]\n',
            2,
            "routes.sim.loops.policy",
            "shout",
        ),
        ('[routes.sim.loops]\npolicy = ["stop", "nudge"]\n', 2, "routes.sim.loops.policy", "last"),
        ('[routes.sim.loops]\npolicy = "stop"\n', 2, "routes.sim.loops.policy", "a list"),
        ('[steer.canned]\nloop = "Stop {sumary}"\n', 2, "steer.canned.loop", "{sumary}"),
        ('[steer.canned]\nloop = "Stop {summary!r}"\n', 2, "steer.canned.loop", "no format"),
        ('[steer.canned]\nloop = "Stop {"\n', 2, "steer.canned.loop", "literal braces"),
        ('[steer.canned]\nhello = "x"\n', 2, "steer.canned.hello", "unknown key"),
    ],
)
def test_bad_loop_settings_name_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, says: str
) -> None:
    path = _config(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: {field}: "), message
    assert says in message


def test_untrusted_arguments_are_sanitized_and_never_markup() -> None:
    from flightdeck.tui.widgets.detail import detail_text

    d = LoopDetector(LoopSettings(repeat_calls=2, stale_turns=0))
    for _ in range(2):
        _turn(d, ("read_file", {"path": "\x1b]0;pwned\x07[bold red]x[/]\nnext"}, "out"))
    ev = d.evidence
    assert ev is not None
    assert all("\x1b" not in c and "\x07" not in c and "\n" not in c for c in ev.calls)
    row = ChildRow(
        id="c1",
        seq=1,
        goal="g",
        group=None,
        route="sim",
        model="sim-1",
        status=ChildStatus.RUNNING,
        activity=Activity(),
        usage=Usage(),
        cost_usd=Decimal(0),
        queued_ts=0.0,
        started_ts=1.0,
        finished_ts=None,
        error=None,
        result=None,
        transcript="",
        loop=ev,
    )
    text = detail_text(row, 2.0)
    assert "[bold red]x[/]" in text.plain  # shown as written, not as markup
    assert not any("bold red" in str(span.style) for span in text.spans)
