"""Searching every transcript: what a search costs on a big batch, and what keeping the index
costs the transcript writer.

- **Search**: 5,000 transcripts of about 200 KB each (1 GB, `BENCH_SEARCH_MB`), written as the
  writer writes them (stamps, roles, text from a vocabulary of 40,000 words, a few rare words
  planted), indexed (the time, and the index's size against the transcripts'); then the median
  of a few searches: a rare word, a common phrase each child's first hit only (the TUI's `F`),
  one child's, and one while 100 transcripts have lines the index has not reached yet; and
  once, a regex, which reads every file (the baseline the index is measured against).
- **Writer**: the real writer process (appender.serve, over its pipe) fed the same events
  (`BENCH_WRITER_MB` of streamed replies and tool lines to 500 transcripts) with its index kept
  and without: the writer's time to have written everything and its CPU, as ratios; and how
  long after that the index had everything.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flightdeck.engine.records.events import EndStream, Stream, Write, encode
from flightdeck.engine.records.lines import LineFormatter
from flightdeck.engine.records.search import compile_pattern, grep
from flightdeck.engine.records.searchindex import SearchIndex, index_path
from flightdeck.engine.records.writerproc import WriterProcess

TOTAL_MB = int(os.environ.get("BENCH_SEARCH_MB", "1000"))
FILES = int(os.environ.get("BENCH_SEARCH_FILES", "5000"))
WRITER_MB = int(os.environ.get("BENCH_WRITER_MB", "200"))
WRITER_FILES = 500
RUNS = int(os.environ.get("BENCH_SEARCH_RUNS", "5"))
RARE = "zanzibarquux"  # planted in a handful of lines
ROLES = ("assistant", "assistant", "assistant", "tool", "tool-call", "engine", "user")


def vocabulary(rng: random.Random, n: int = 40_000) -> list[str]:
    """Pseudo-words, Zipf-ish: a few very common, a long tail."""
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in ("a", "e", "i", "o", "u", "ou", "ai")]
    return ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(n)]


def line_pool(rng: random.Random, words: list[str], n: int = 20_000) -> list[tuple[str, str]]:
    cumulative = list(itertools.accumulate(1 / (i + 1) for i in range(len(words))))
    pool = []
    for _ in range(n):
        text = " ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(4, 40)))
        if rng.random() < 0.05:
            text = "rate limit reached, retry 2/6 in 3.1s: " + text
        pool.append((rng.choice(ROLES), text))
    return pool


def write_batch(folder: Path, rng: random.Random, pool: list[tuple[str, str]]) -> int:
    """FILES transcripts of about TOTAL_MB in all; the bytes written."""
    per_file = TOTAL_MB * 1_000_000 // FILES
    total = 0
    rare_files = set(rng.sample(range(FILES), 5))
    for n in range(FILES):
        fmt = LineFormatter()
        chunks, size, ts = [], 0, 1_800_000_000.0 + n
        while size < per_file:
            role, text = pool[rng.randrange(len(pool))]
            data = fmt.write(role, text, ts)
            chunks.append(data)
            size += len(data)
            ts += 0.37
        if n in rare_files:
            chunks.insert(len(chunks) // 2, fmt.write("tool", f"found {RARE} in config", ts))
        blob = b"".join(chunks)
        (folder / f"c{n:05d}.log").write_bytes(blob)
        total += len(blob)
    return total


CPU: dict[str, float] = {}  # each search's median CPU seconds: on a shared machine, wall is noise


def timed(fn: object, runs: int = RUNS, *, name: str = "") -> tuple[float, int]:
    """Median seconds of `runs` calls, and what the last returned (the median CPU seconds in
    CPU[name])."""
    times, cpu, out = [], [], 0
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    CPU[name] = round(statistics.median(cpu), 4)
    return statistics.median(times), out


def bench_search(root: Path) -> dict[str, object]:
    rng = random.Random(7)
    folder = root / "batch"
    folder.mkdir()
    t0 = time.perf_counter()
    total = write_batch(folder, rng, line_pool(rng, vocabulary(rng)))
    generate_s = time.perf_counter() - t0
    index = SearchIndex(folder)
    t0 = time.perf_counter()
    index.catch_up()
    index_s = time.perf_counter() - t0
    index.close()
    index_bytes = index_path(folder).stat().st_size

    def count(pattern: str, *, regex: bool = False, **kw: object) -> int:
        return sum(1 for _ in grep(folder, compile_pattern(pattern, regex=regex), **kw))  # type: ignore[arg-type]

    rare_s, rare_hits = timed(lambda: count(RARE), name="rare_word")
    first_s, first_hits = timed(
        lambda: count("rate limit reached", first_only=True), name="common_first_only"
    )
    child_s, child_hits = timed(lambda: count("rate limit", names=["c00042.log"]), name="one_child")
    regex_s, regex_hits = timed(lambda: count(RARE, regex=True), runs=1, name="regex_scan")
    # 100 transcripts written to since the index last caught up: their new lines are read.
    fmt = LineFormatter()
    for n in range(0, FILES, max(1, FILES // 100)):
        with (folder / f"c{n:05d}.log").open("ab") as fh:
            fh.write(fmt.write("assistant", f"late {RARE} line " * 20, 1_900_000_000.0))
    tail_s, tail_hits = timed(lambda: count(RARE), name="with_100_unindexed_tails")
    return {
        "bench": "search",
        "transcripts": FILES,
        "transcripts_mb": round(total / 1e6),
        "generate_s": round(generate_s, 1),
        "index_s": round(index_s, 1),
        "index_mb_per_s": round(total / 1e6 / index_s, 1),
        "index_size_ratio": round(index_bytes / total, 3),
        "rare_word_s": round(rare_s, 4),
        "rare_word_hits": rare_hits,
        "common_first_only_s": round(first_s, 3),
        "common_first_only_hits": first_hits,
        "one_child_s": round(child_s, 4),
        "one_child_hits": child_hits,
        "with_100_unindexed_tails_s": round(tail_s, 4),
        "with_100_unindexed_tails_hits": tail_hits,
        "regex_scan_s": round(regex_s, 2),
        "regex_scan_hits": regex_hits,
        "regex_scan_over_index": round(regex_s / rare_s, 1),
        "cpu_s": dict(CPU),
        "load_average": round(os.getloadavg()[0], 1),
    }


def writer_frames(rng: random.Random, folder: Path) -> list[bytes]:
    """WRITER_MB of transcript events as the engine frames them for the writer process."""
    words = vocabulary(rng, 5_000)
    frames: list[bytes] = []
    size = 0
    ts = 1_800_000_000.0
    while size < WRITER_MB * 1_000_000:
        events: list[Write | Stream | EndStream] = []
        for _ in range(200):
            path = str(folder / f"w{rng.randrange(WRITER_FILES):04d}.log")
            text = " ".join(rng.choices(words, k=rng.randint(4, 30)))
            ts += 0.001
            if rng.random() < 0.6:  # a streamed reply: a few chunks, then its end
                for piece in (text[:20], text[20:] + "\n"):
                    events.append(Stream(path, ts, piece))
                events.append(EndStream(path, ts))
            else:
                events.append(Write(path, ts, rng.choice(ROLES), text))
            size += len(text) + 30
        frames.append(encode(events))
    return frames


def bench_writer(root: Path, frames_for: object) -> dict[str, object]:
    def run(index: bool) -> tuple[float, float, float]:
        folder = root / f"writer-{index}"
        folder.mkdir()
        frames = frames_for(folder)  # type: ignore[operator]
        code = (
            "import sys; from flightdeck.engine.records.appender import Transcripts, serve; "
            f"serve(0, 1, Transcripts(128, index={index}))"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        writer = WriterProcess(proc)
        t0 = time.perf_counter()
        for frame in frames:
            writer.send(frame)
        writer.wait_written()
        written_s = time.perf_counter() - t0
        caught_s = 0.0
        if index:  # how long after that the index had every byte
            names = {p.name: p.stat().st_size for p in folder.glob("*.log")}
            while True:
                try:
                    conn = sqlite3.connect(f"{index_path(folder).as_uri()}?mode=ro", uri=True)
                    have = dict(conn.execute("SELECT name, indexed FROM files"))
                    conn.close()
                except sqlite3.Error:
                    have = {}
                if have == names:
                    break
                time.sleep(0.05)
            caught_s = time.perf_counter() - t0 - written_s
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        writer.stop(60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return written_s, cpu_s, caught_s

    off_s, off_cpu, _ = run(False)
    on_s, on_cpu, caught_s = run(True)
    size = sum(p.stat().st_size for p in (root / "writer-True").glob("*.log"))
    return {
        "bench": "search_writer",
        "transcripts_mb": round(size / 1e6),
        "writer_s_without_index": round(off_s, 2),
        "writer_s_with_index": round(on_s, 2),
        "writer_time_ratio": round(on_s / off_s, 2),
        "writer_cpu_s_without_index": round(off_cpu, 2),
        "writer_cpu_s_with_index": round(on_cpu, 2),
        "writer_cpu_ratio": round(on_cpu / off_cpu, 2),
        "index_caught_up_after_s": round(caught_s, 2),
    }


def main() -> list[dict[str, object]]:
    root = Path(tempfile.mkdtemp(prefix="bench-search-"))
    try:
        results = [bench_search(root)]
        results.append(bench_writer(root, lambda folder: writer_frames(random.Random(3), folder)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for r in results:
        print(json.dumps(r), file=sys.stderr)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
