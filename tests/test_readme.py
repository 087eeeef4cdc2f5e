"""The README and docs/: short, linked, every link resolving; their examples work as written."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"(`+).*?\1")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces made hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file (repeats numbered as GitHub numbers them)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Every link target in a Markdown file, outside code blocks and code spans."""
    out = []
    for line in _prose(path.read_text(encoding="utf-8")):
        out.extend(_LINK.findall(_CODE_SPAN.sub("", line)))
    return out


def broken_links(path: Path) -> list[str]:
    """The relative links in `path` whose file, or heading in that file, does not exist."""
    bad = []
    for target in links(path):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not this repository's to check
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{target} (no such heading)")
    return bad


def _contents(text: str) -> list[str]:
    """The link targets of the README's table of contents (its `## Contents` list)."""
    section = text.split("\n## Contents\n", 1)
    assert len(section) == 2, "the README has no `## Contents` section"
    listed = re.match(r"\n*((?:- .*\n|  .*\n)+)", section[1])
    assert listed is not None, "`## Contents` is not followed by a list"
    return _LINK.findall(listed.group(1))


def test_the_readme_is_short_with_contents_and_links_every_docs_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < README_MAX_LINES
    contents = _contents(text)
    headings = {
        _slug(line[3:]) for line in _prose(text) if line.startswith("## ") and line != "## Contents"
    }
    assert {t.lstrip("#") for t in contents if t.startswith("#")} == headings, (
        "the contents list every section of the README, and only those"
    )
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    pages = set(DOCS.glob("*.md"))
    assert pages, "docs/ has no pages"
    assert {p.resolve() for p in pages} - linked == set(), "docs pages the README does not link"


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    bad = {
        str(p.relative_to(ROOT)): broken
        for p in (README, *sorted(DOCS.glob("*.md")))
        if (broken := broken_links(p))
    }
    assert bad == {}


def test_every_long_docs_page_starts_with_a_summary_and_contents() -> None:
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# "), f"{page.name} starts with its title"
        assert lines[1] == "" and lines[2] and not lines[2].startswith(("#", "-", "|")), (
            f"{page.name}: a one-line summary under the title"
        )
        sections = [line for line in _prose("\n".join(lines)) if line.startswith("## ")]
        if len(lines) > 120 and len(sections) > 2:
            local = [t for t in links(page) if t.startswith("#")]
            assert local, f"{page.name} is long: it needs a table of contents"


def test_the_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Page B\n\n## Some `code` here\n", encoding="utf-8")
    a = tmp_path / "a.md"
    a.write_text(
        "# A\n\n[ok](b.md#some-code-here) [no heading](b.md#nothing) [no file](c.md)\n"
        "[self](#a) `[in code](d.md)`\n```\n[in a block](e.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(a) == ["b.md#nothing (no such heading)", "c.md (no such file)"]


def _no_home() -> dict[str, str]:
    """This environment without FLIGHTDECK_HOME: the example's state folder is then the config's."""
    return {k: v for k, v in os.environ.items() if k != "FLIGHTDECK_HOME"}


def _run_example(
    folder: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """docs/python-api.md's example, run as written in `folder` (with `env`, else this one's)."""
    section = (DOCS / "python-api.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    run = [sys.executable, "-c", code.group(1)]
    return subprocess.run(run, cwd=folder, capture_output=True, text=True, timeout=60, env=env)


def test_the_from_python_example_runs(tmp_path: Path) -> None:
    (tmp_path / "flightdeck.toml").write_text(
        # Each call waits at least 60 ms for its first token (0.6 x 400 ms x 0.25): the steer
        # sent right after start() is delivered at t0's next turn, not missed.
        "[routes.sim]\ntime_scale = 0.25\nlatency_ms = 400\ntokens_per_s = 4000\ntool_turns = 2\n",
        encoding="utf-8",
    )
    (tmp_path / "tasks.jsonl").write_text(
        "".join(f'{{"id": "t{i}", "goal": "Review item {i}"}}\n' for i in range(3)),
        encoding="utf-8",
    )
    done = _run_example(tmp_path, _no_home())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    finished = [line.split() for line in lines[:3]]
    assert [f[0] for f in finished] == ["1/3", "2/3", "3/3"]
    assert sorted(f[1] for f in finished) == ["t0", "t1", "t2"]
    assert {f[2] for f in finished} == {"completed"}
    assert re.fullmatch(r"completed 3 0\.\d+", lines[3]), lines[3]
    assert lines[4] == "[<SteerState.DELIVERED: 'delivered'>]"
    assert len(lines) == 5
    assert (tmp_path / ".flightdeck" / "flightdeck.db").is_file()


@pytest.mark.parametrize("home", [True, False])
def test_the_from_python_example_runs_in_the_state_folder_the_cli_reads(
    tmp_path: Path, home: bool
) -> None:
    # Found by a review: the example ran in ./.flightdeck whatever FLIGHTDECK_HOME or the
    # config's [engine] state_dir said, where `flightdeck ls` then did not look.
    config = '[engine]\nstate_dir = "from-config"\n[routes.sim]\ntime_scale = 0.01\n'
    (tmp_path / "flightdeck.toml").write_text(config, encoding="utf-8")
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0", "goal": "a"}\n', encoding="utf-8")
    env = {**_no_home(), **({"FLIGHTDECK_HOME": str(tmp_path / "home")} if home else {})}
    done = _run_example(tmp_path, env)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", "ls"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "NO_COLOR": "1"},
    )
    assert listed.returncode == 0 and "completed" in listed.stdout, listed.stdout + listed.stderr
    used = tmp_path / ("home" if home else "from-config")
    assert (used / "flightdeck.db").is_file() and not (tmp_path / ".flightdeck").exists()


def test_the_from_python_example_keeps_the_configs_limits_on_input(tmp_path: Path) -> None:
    # load_batch's own defaults are not the config's: the example gives it [engine] max_tasks
    # (and max_task_chars), or a batch the CLI refuses would run from Python.
    (tmp_path / "flightdeck.toml").write_text("[engine]\nmax_tasks = 2\n", encoding="utf-8")
    (tmp_path / "tasks.jsonl").write_text(
        '{"goal": "a"}\n{"goal": "b"}\n{"goal": "c"}\n', encoding="utf-8"
    )
    done = _run_example(tmp_path)
    assert done.returncode != 0
    assert (
        "SpecError: tasks.jsonl:3: more than 2 tasks, the limit ([engine] max_tasks" in done.stderr
    )
    assert not (tmp_path / ".flightdeck").exists()


def test_the_layout_map_names_every_module_and_only_real_ones() -> None:
    # Modules of engine/, tui/ and the engine's parts are named one by one; deeper folders
    # (tasks/, screens/, ...) by their folder.
    section = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = section.split("## The source layout", 1)[1]
    block = re.search(r"```\nengine/.*?```", section, re.S)
    assert block is not None
    named = set(re.findall(r"\b([a-z_]+\.py)\b", block.group(0)))
    folders = set(re.findall(r"\b([a-z_]+)/", block.group(0)))
    every = {p for folder in ("engine", "tui") for p in (ROOT / folder).rglob("*.py")}
    assert named - {p.name for p in every} == set(), "the map names modules that do not exist"
    unnamed = set()
    for path in every:
        depth = len(path.relative_to(ROOT).parts)
        if path.name == "__init__.py" or (depth > 3 - path.is_relative_to(ROOT / "tui")):
            assert path.parent.name in folders, f"the map does not name {path.parent}"
        elif path.name not in named:
            unnamed.add(str(path.relative_to(ROOT)))
    assert unnamed == set(), "modules the map does not name"


def undocumented_options(commands_md: str) -> list[str]:
    """Every command of `flightdeck --help` with no "### `flightdeck COMMAND`" section in
    `commands_md`, and every option its section does not name (by any of its spellings)."""
    from flightdeck.tui.cli import _parser

    [sub] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    sections = dict(
        re.findall(r"^### `flightdeck ([a-z-]+)`\n(.*?)(?=^##)", commands_md + "\n##", re.S | re.M)
    )
    missing = []
    for command, parser in sub.choices.items():
        if command not in sections:
            missing.append(command)
            continue
        for action in parser._actions:
            names = [o for o in action.option_strings if o not in ("-h", "--help")]
            shown = [o for o in names if re.search(rf"{re.escape(o)}(?![\w-])", sections[command])]
            if names and action.help != argparse.SUPPRESS and not shown:
                missing.append(f"{command} {names[-1]}")
    return missing


def test_every_command_and_option_has_its_place_in_the_commands_page() -> None:
    assert undocumented_options((DOCS / "commands.md").read_text(encoding="utf-8")) == []


def test_the_commands_check_finds_a_command_or_an_option_left_out() -> None:
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    without_grep = re.sub(r"^### `flightdeck grep`\n.*?(?=^##)", "", text, flags=re.S | re.M)
    assert undocumented_options(without_grep) == ["grep"]
    assert undocumented_options(text.replace("--no-rerun", "")) == ["resume --no-rerun"]


def test_every_make_target_is_in_the_development_page() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    phony = re.search(r"^\.PHONY: (.*)$", makefile, re.M)
    assert phony is not None
    page = (DOCS / "development.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^make ([a-z-]+)", page, re.M))
    assert set(phony.group(1).split()) - listed == set(), "make targets not listed"


def undocumented_keys(pages: str) -> set[str]:
    """Every key flightdeck.toml may hold that `pages` neither shows set (`key =`) nor names."""
    from flightdeck.engine.inputs.settings import load
    from flightdeck.engine.inputs.settings.cluster import RAY_KEYS
    from flightdeck.engine.inputs.settings.command import COMMAND_KEYS
    from flightdeck.engine.inputs.settings.loops import LOOP_KEYS

    keys = {
        *load._ENGINE_KEYS,
        *load._ROUTE_KEYS,
        *load._SIM_OPTIONS,
        *load._HTTP_OPTIONS,
        *load._PRICE_KEYS,
        *load._RETRY_KEYS,
        *load._BUDGET_KEYS,
        *load._TUI_KEYS,
        *COMMAND_KEYS,
        *RAY_KEYS,
        *LOOP_KEYS,
    }
    return {k for k in keys if not re.search(rf"(^|[{{,\s`(]){k} *=|`{k}`", pages, re.M)}


def test_every_key_of_the_config_file_is_documented() -> None:
    pages = "".join(
        (DOCS / name).read_text(encoding="utf-8")
        for name in ("configuration.md", "agents.md", "ray.md", "tui.md")
    )
    assert undocumented_keys(pages) == set()
    assert undocumented_keys(pages.replace("tool_turns", "")) == {"tool_turns"}


def commands_the_readme_leaves_out(readme: str) -> set[str]:
    """The commands of `flightdeck --help` that the README's `## Commands` section never names."""
    from flightdeck.tui.cli import _parser

    [sub] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    section = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return {c for c in sub.choices if not re.search(rf"`{c}\b", section)}


def test_the_readme_names_every_command() -> None:
    text = README.read_text(encoding="utf-8")
    assert commands_the_readme_leaves_out(text) == set()
    without_wait = "\n".join(line for line in text.splitlines() if "`wait" not in line)
    assert commands_the_readme_leaves_out(without_wait) == {"wait"}


_EXAMPLE = re.compile(r"^```(toml|jsonl|yaml)\n(.*?)^```", re.S | re.M)


def examples() -> list[tuple[str, str, str]]:
    """Every TOML, JSONL and YAML block of the README and docs/: (where, language, text)."""
    found = []
    for page in (README, *sorted(DOCS.glob("*.md"))):
        text = page.read_text(encoding="utf-8")
        for m in _EXAMPLE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", m.group(1), m.group(2)))
    return found


def example_fails(where: str, lang: str, text: str, earlier: dict[str, object]) -> str | None:
    """Why one example block would not load as the docs present it (None: it loads). A block
    that does not load on its own, of route keys alone with no `provider`, is a fragment: it
    must repeat, value for value, what an earlier block of its page set."""
    import tomllib

    from flightdeck.engine.errors import FlightdeckError
    from flightdeck.engine.inputs.settings import load_settings
    from flightdeck.engine.inputs.tasks import load_batch

    data = tomllib.loads(text) if lang == "toml" else {}
    path = Path(f"example.{lang}")
    path.write_text(text, encoding="utf-8")
    try:
        if lang != "toml" or {"tasks", "schedules", "batch"} & set(data):
            load_batch(path)
        else:
            load_settings(path, env={})
        return None
    except FlightdeckError as exc:
        why = f"{where}: {exc}"
    routes = data.get("routes", {})
    if not data or set(data) != {"routes"} or any("provider" in r for r in routes.values()):
        return why
    earlier_routes = earlier.get("routes", {})
    assert isinstance(earlier_routes, dict)
    for name, keys in routes.items():
        for key, value in keys.items():
            if earlier_routes.get(name, {}).get(key) != value:
                return f"{where}: routes.{name}.{key} is not what the page set before"
    return None


def test_every_config_and_task_file_example_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tomllib

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hold").mkdir()  # what the hold_dir examples name
    (tmp_path / "repo").mkdir()  # a workspace
    (tmp_path / "prs.txt").write_text("101\n102\n", encoding="utf-8")
    found, bad = examples(), []
    assert len(found) > 10, "the docs' examples were not found"
    earlier: dict[str, dict[str, object]] = {}
    for where, lang, text in found:
        page = where.partition(":")[0]
        if (why := example_fails(where, lang, text, earlier.get(page, {}))) is not None:
            bad.append(why)
        if lang == "toml":
            merged = earlier.setdefault(page, {"routes": {}})
            routes = merged["routes"]
            assert isinstance(routes, dict)
            for name, keys in tomllib.loads(text).get("routes", {}).items():
                routes.setdefault(name, {}).update(keys)
    assert bad == []


def test_the_example_checker_finds_a_broken_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert example_fails("a", "toml", "[engine]\nstal_after_s = 5\n", {}) is not None
    assert example_fails("b", "jsonl", '{"goal": ""}\n', {}) is not None
    fragment = '[routes.x]\nresume_argv = ["a"]\n'
    assert example_fails("c", "toml", fragment, {"routes": {"x": {"resume_argv": ["a"]}}}) is None
    assert example_fails("d", "toml", fragment, {"routes": {"x": {"resume_argv": ["b"]}}})


def test_the_configuration_page_shows_every_default_the_code_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its first block is "every key with its default, except those marked *example*": without
    # the examples it must load to exactly the settings of no config at all.
    from flightdeck.engine.inputs.settings import load_settings

    monkeypatch.chdir(tmp_path)
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    block = page.split("## The configuration file", 1)[1]
    found = re.search(r"```toml\n(.*?)```", block, re.S)
    assert found is not None
    kept, in_example = [], False
    for line in found.group(1).splitlines():
        if line.startswith("["):
            in_example = "example" in line  # a whole table marked so: [budget]
        if not in_example and not re.search(r"#\s*example", line):
            kept.append(line)
    (tmp_path / "defaults.toml").write_text("\n".join(kept) + "\n", encoding="utf-8")
    shown = load_settings(Path("defaults.toml"), env={})  # state_dir as the default says it
    assert replace(shown, source=None) == load_settings(None, env={})
