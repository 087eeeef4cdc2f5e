#!/usr/bin/env bash
# Build the wheel, install it (not editable) into a fresh venv, and run it from a folder
# outside the repository: a package the package-dir mapping forgot, or a missing .tcss,
# fails here. `make wheel-test` runs it; so does .ci/run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# From a copy of the sources: a build/ folder left by an earlier build would hide a mistake.
mkdir "$work/src"
tar -C "$root" --exclude=./.git --exclude=./.venv --exclude=./build --exclude='*.egg-info' \
  --exclude=./.flightdeck --exclude=./.typecheck -cf - . | tar -C "$work/src" -xf -
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$work/src"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/flightdeck-*.whl

site="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
for bare in engine tui; do
  if [ -e "$site/$bare" ]; then
    echo "wheel-check: the wheel installed a bare '$bare' package into site-packages" >&2
    exit 1
  fi
done

cd "$work"
"$work/venv/bin/flightdeck" --version
# Every module imports from the wheel, and every stylesheet a screen or widget names is there.
"$work/venv/bin/python" - <<'PY'
import importlib, importlib.util, pkgutil, pathlib, re
import flightdeck.engine, flightdeck.tui
# An optional extra's modules import only where it is installed (`pip install flightdeck[ray]`).
OPTIONAL = {"flightdeck.engine.executors.cluster": "ray"}
for pkg in (flightdeck.engine, flightdeck.tui):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        extra = next((dep for p, dep in OPTIONAL.items() if m.name.startswith(p)), None)
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue
        importlib.import_module(m.name)
tui = pathlib.Path(flightdeck.tui.__file__).parent
for source in tui.rglob("*.py"):
    for name in re.findall(r'CSS_PATH\s*=\s*"([^"]+)"', source.read_text()):
        assert (source.parent / name).is_file(), f"{source.name}: {name} is not in the wheel"
PY
cat > flightdeck.toml <<'TOML'
[engine]
max_concurrent = 4

[routes.sim]
provider = "sim"
time_scale = 0.001
TOML
printf '{"id": "a", "goal": "Summarise README.md"}\n{"id": "b", "goal": "List the files"}\n' > tasks.jsonl
"$work/venv/bin/flightdeck" run tasks.jsonl --headless
"$work/venv/bin/flightdeck" report --format json > report.json
"$work/venv/bin/python" - <<'PY'
import json
totals = json.load(open("report.json"))["totals"]
assert totals["completed"] == 2 and totals["children"] == 2, f"wheel-check: {totals}"
PY
"$work/venv/bin/flightdeck" ls
# serve: textual-serve and the page of batches (a template in the wheel), behind the token.
"$work/venv/bin/python" - <<'PY'
import signal, subprocess, sys, urllib.error, urllib.request
serve = subprocess.Popen(
    [sys.executable, "-m", "flightdeck.tui.cli", "serve", "--port", "0"],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
)
try:
    base, token = serve.stdout.readline().strip().split("/?token=")
    try:
        urllib.request.urlopen(base + "/")
        raise SystemExit("wheel-check: serve answered without the token")
    except urllib.error.HTTPError as refused:
        assert refused.code == 401, refused.code
    port = base.rsplit(":", 1)[1]
    asked = urllib.request.Request(base + "/", headers={"Cookie": f"flightdeck-{port}={token}"})
    page = urllib.request.urlopen(asked).read().decode()
    assert "<table>" in page and "tasks" in page, page
finally:
    serve.send_signal(signal.SIGINT)
    serve.wait(30)
PY
echo "wheel-check: ok"
