"""`make bench`: run every tests/bench/bench_*.py in its own process, print a table, keep JSON.

Each benchmark prints one JSON object (or a list of them) as its last stdout line. A fresh
process per benchmark keeps peak-RSS figures honest and stops one from warming another's caches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"


def main(names: list[str]) -> int:
    RESULTS.mkdir(exist_ok=True)
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if any(n in s.stem for n in names)]
    failed = 0
    collected: list[dict[str, object]] = []
    for script in scripts:
        print(f"== {script.stem}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            failed += 1
            print(proc.stdout + proc.stderr)
            continue
        last = proc.stdout.strip().splitlines()[-1]
        data = json.loads(last)
        results = data if isinstance(data, list) else [data]
        for result in results:
            result["wall_s"] = round(time.perf_counter() - t0, 2)
            collected.append(result)
            for key, value in result.items():
                print(f"   {key:<32} {value}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"bench-{stamp}.json"
    out.write_text(json.dumps(collected, indent=2) + "\n")
    print(f"results: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
