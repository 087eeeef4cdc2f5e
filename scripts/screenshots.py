"""`make screenshots`: the screen `flightdeck run` shows on a terminal, saved: the demo batch
(sim) run by an owner process (`run --detach`), the app attached to it over the store, as
`flightdeck run` and `attach` run it.

Writes screenshots/main.svg, steer.svg and help.svg, plus main.png when rsvg-convert or
cairosvg is available (the README shows the SVG; the PNG is for places that cannot). The
demo's simulated delays are sped up (every sim route's `time_scale`, in a copy of the example
config) so a busy moment (some done, some retrying, one failed) arrives in seconds.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import ChildStatus, Snapshot
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.dialogs import SteerDialog
from flightdeck.tui.screens.main import UiOptions
from flightdeck.tui.widgets.rows import is_retrying

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
SIZE = (160, 45)
SPEEDUP = 0.3  # multiplies the demo's simulated delays
WAIT_S = 60.0


def faster(config: str) -> str:
    """The example config's text with every sim route's delays scaled by SPEEDUP."""
    lines = [line for line in config.splitlines() if not line.startswith("time_scale")]
    out = []
    for line in lines:
        out.append(line)
        if line.strip() == 'provider = "sim"':
            out.append(f"time_scale = {SPEEDUP}")
    return "\n".join(out) + "\n"


def flightdeck(*args: str) -> str:
    """Run `flightdeck ARGS` as a user does; its stdout."""
    cli = [sys.executable, "-m", "flightdeck.tui.cli", *args]
    return subprocess.run(cli, cwd=ROOT, check=True, capture_output=True, text=True).stdout


def busy(snap: Snapshot) -> bool:
    """A moment worth a picture: work done, work running, something needing attention."""
    t = snap.totals
    attention = any(
        r.status.terminal and r.status is not ChildStatus.COMPLETED for r in snap.children
    )
    retrying = any(is_retrying(r) for r in snap.children)
    looping = any(r.loop is not None for r in snap.children)  # the demo's triage-todos
    return t.completed >= 4 and t.running >= 3 and (attention or retrying) and looping


def to_png(svg: Path) -> Path | None:
    png = svg.with_suffix(".png")
    if shutil.which("rsvg-convert"):
        subprocess.run(["rsvg-convert", str(svg), "-o", str(png)], check=True)
        return png
    try:
        import cairosvg  # type: ignore[import-not-found]

        cairosvg.svg2png(url=str(svg), write_to=str(png))
    except (ImportError, OSError):
        return None
    return png


async def capture(view: StoreView) -> list[Path]:
    app = FlightdeckApp(view, UiOptions(cursor_blink=False))
    shots: list[Path] = []

    async def save(name: str) -> None:
        await pilot.pause(0.4)
        shots.append(Path(app.save_screenshot(name, path=str(OUT))))

    async with app.run_test(size=SIZE) as pilot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not busy(view.snapshot()) and loop.time() < deadline:
            await pilot.pause(0.2)
        table = app.main.table
        running = [i for i in table.shown if table.rows_by_id[i].status is ChildStatus.RUNNING]
        looping = [i for i in running if table.rows_by_id[i].loop is not None]
        if looping or running:
            # A looping child shows its evidence under the table; else the latest started, the
            # likeliest to run on a while.
            table.select((looping or running)[-1])
        await save("main.svg")
        await pilot.press("s")
        if isinstance(app.screen, SteerDialog):
            await pilot.press(*"cite file names and line numbers")
            await save("steer.svg")
            await pilot.press("escape")
        await pilot.press("question_mark")
        await save("help.svg")
        await pilot.press("escape")
        app.exit()
    return shots


def main() -> int:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flightdeck-shots-") as folder:
        state, config = Path(folder) / "state", Path(folder) / "flightdeck.toml"
        config.write_text(faster((ROOT / "examples" / "flightdeck.toml").read_text()))
        where = ("--state-dir", str(state))
        batch_id = flightdeck(
            "run", "examples/demo.toml", "--config", str(config), "--detach", *where
        )
        batch_id = batch_id.strip()
        view = StoreView(state / "flightdeck.db", batch_id)
        try:
            shots = asyncio.run(capture(view))
        finally:
            view.close()
            flightdeck("stop", batch_id, "--all", *where)
            subprocess.run(
                [sys.executable, "-m", "flightdeck.tui.cli", "wait", batch_id, *where],
                cwd=ROOT,
                capture_output=True,
                timeout=60,
            )
    pngs = 0
    for svg in shots:
        png = to_png(svg) if svg.name == "main.svg" else None
        pngs += png is not None
        print(f"wrote {svg.relative_to(ROOT)}" + (f" and {png.name}" if png else ""))
    if shots and not pngs:
        print("no PNG converter found (rsvg-convert or cairosvg): SVG only")
    return 0 if shots else 1


if __name__ == "__main__":
    sys.exit(main())
