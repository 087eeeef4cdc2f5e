"""Rate limits against a server that enforces them: the achieved request rate as a ratio of the
limit, and the share of requests that drew a 429 — with our limits and, side by side in the same
run, with retries alone.

- per minute: the loopback server answers 429 (with `retry-after-ms`) above LIMIT requests in
  any sliding minute. Time runs SCALE times faster on both sides (a minute is one real second),
  so a few seconds cover several windows; 16 threads each loop route admission (pause + rpm
  bucket) and a real SDK call, with our RetryPolicy around it, exactly as a child does.
- in flight: the server answers 429 above N concurrent requests; a batch runs through the real
  Engine with the route's `max_concurrent` = N. The limit as a rate is N / mean service time.

- unknown limit: the server enforces a provider's bucket (240 requests, refilling 4 a second;
  or, the tpm variant, 240 calls' worth of tokens refilling 4 calls' worth a second), sends its
  limits in the OpenAI or Anthropic headers (or none) and `retry-after` on each 429; 400
  one-call children on 32 slots through the real Engine, with NO rpm/tpm configured and the
  default retry settings. The makespan is compared with the least time the bucket allows.

Targets: at least 0.9 of the limit with under 2% 429s; for the unknown limit, 0 children
failed, at most 5% of attempts 429, makespan at most 1.1x the bucket's bound.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: loopback, helpers

from flightdeck.engine.api import Engine
from flightdeck.engine.control.retry import RetryPolicy
from flightdeck.engine.control.throttle import RateLimiter, RouteThrottle
from flightdeck.engine.inputs.settings import RetrySettings
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.providers import make_provider
from flightdeck.engine.providers.base import Message, TurnRequest

from helpers import batch, settings
from loopback import BucketLimit, InFlightLimit, Loopback, Reply, WindowLimit, route_for

RESULTS = Path(__file__).parent / "results"
SCALE = 60.0  # simulated seconds per real second
LIMIT = 60  # requests per (simulated) minute
# Shrunk from the environment by `make test` (tests/test_bench_smoke.py), so it stays runnable.
RUN_S = float(os.environ.get("BENCH_RATELIMIT_S", "2.0"))  # real seconds: two windows
THREADS = 16
IN_FLIGHT = 4
CHILDREN = int(os.environ.get("BENCH_RATELIMIT_CHILDREN", "32"))
SERVICE = Reply(text="x" * 32, chunk_chars=8, chunk_delay_s=0.05)  # about 0.2 s a call
RETRY = RetrySettings(attempts=10, base_s=0.02, max_s=0.5)
# The unknown-limit scenario: real waits (a scale of 4 makes the bucket refill 4x as fast).
BUCKET_CHILDREN = int(os.environ.get("BENCH_RATELIMIT_BUCKET_CHILDREN", "400"))
BUCKET_SCALE = float(os.environ.get("BENCH_RATELIMIT_BUCKET_SCALE", "1"))
BUCKET_SLOTS = 32
BUCKET_REPLY = Reply(text="x" * 32, chunk_chars=8, chunk_delay_s=0.05, output_tokens=12)


def per_minute(provider: str, buckets: bool) -> dict[str, object]:
    def scaled() -> float:
        return time.monotonic() * SCALE

    def wait(cancel: threading.Event | None, seconds: float) -> bool:
        return (cancel or threading.Event()).wait(seconds / SCALE)

    request = TurnRequest("system", (Message("user", "hi"),), (), max_tokens=16)
    with Loopback() as server:
        route = route_for(server, provider, rpm=LIMIT if buckets else None, retry=RETRY)
        client = make_provider(route, {})
        list(client.open(request))  # warm up (imports, pool) outside the measurement
        server.responder = WindowLimit(LIMIT, window_s=60.0 / SCALE)
        limiter = RateLimiter(route.rpm, clock=scaled, wait=wait)
        # The route pause stays on real time: Retry-After comes from the server in real time.
        throttle = RouteThrottle(limiter=limiter)
        stop = threading.Event()
        t0 = time.monotonic()
        deadline = t0 + RUN_S

        def one_call() -> None:
            throttle.admit(route, 0, stop)
            list(client.open(request))

        def work() -> None:
            policy = RetryPolicy(RETRY, throttle=throttle)
            while time.monotonic() < deadline:
                policy.call(one_call, interrupt=stop)

        threads = [threading.Thread(target=work) for _ in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        client.close()
        served = [s for s in server.served if t0 <= s[0] < deadline]
    ok = sum(1 for s in served if s[2] == 200)
    limited = sum(1 for s in served if s[2] == 429)
    minutes = RUN_S * SCALE / 60.0
    return {
        "limit": f"{LIMIT}/min",
        "mode": "buckets + retries" if buckets else "retries only",
        "provider": provider,
        "requests": ok + limited,
        "ratio_of_limit": round(ok / minutes / LIMIT, 3),
        "share_429": round(limited / max(1, ok + limited), 4),
    }


def in_flight(capped: bool) -> dict[str, object]:
    with Loopback() as server:
        gate = InFlightLimit(server, IN_FLIGHT, SERVICE)
        server.responder = gate
        route = route_for(
            server, "openai", max_concurrent=IN_FLIGHT if capped else None, retry=RETRY
        )
        with tempfile.TemporaryDirectory() as tmp:
            engine = Engine(
                batch(CHILDREN, route="openai"),
                settings(route, pool=16),
                state_dir=Path(tmp),
                env={},
            )
            engine.start()
            assert engine.wait(120)
            snap = engine.snapshot()
            engine.close()
        served = list(server.served)
    failed = sum(1 for r in snap.children if r.status is not ChildStatus.COMPLETED)
    ok = [s for s in served if s[2] == 200]
    limited = sum(1 for s in served if s[2] == 429)
    span = max(s[1] for s in served) - min(s[0] for s in served)
    mean_service = sum(end - start for start, end, _ in ok) / len(ok)
    limit_rate = IN_FLIGHT / mean_service
    return {
        "limit": f"{IN_FLIGHT} in flight",
        "mode": "max_concurrent + retries" if capped else "retries only",
        "provider": "openai",
        "requests": len(ok) + limited,
        "ratio_of_limit": round(len(ok) / span / limit_rate, 3),
        "share_429": round(limited / max(1, len(ok) + limited), 4),
        "children_failed": failed,
    }


def unknown_limit(provider: str, dialect: str | None, tokens: bool) -> dict[str, object]:
    """400 one-call children, 32 slots, no limit configured, against the server's bucket."""
    calls = 240  # the bucket holds this many calls, and refills 4 a second
    per_call = BUCKET_REPLY.input_tokens + BUCKET_REPLY.output_tokens
    limit = BucketLimit(
        None if tokens else calls,
        calls * per_call if tokens else None,
        dialect=dialect,
        scale=BUCKET_SCALE,
        reply=BUCKET_REPLY,
    )
    with Loopback(limit) as server:
        route = route_for(server, provider, retry=RetrySettings())  # the defaults: 6 attempts
        with tempfile.TemporaryDirectory() as tmp:
            engine = Engine(
                batch(BUCKET_CHILDREN, route=provider),
                settings(route, pool=BUCKET_SLOTS),
                state_dir=Path(tmp),
                env={},
            )
            engine.start()
            assert engine.wait(900)
            snap = engine.snapshot()
            engine.close()
        served = list(server.served)
    failed = sum(1 for r in snap.children if r.status is not ChildStatus.COMPLETED)
    ok = [s for s in served if s[2] == 200]
    limited = sum(1 for s in served if s[2] == 429)
    span = max(s[1] for s in ok) - min(s[0] for s in served)
    service = sum(end - start for start, end, _ in ok) / len(ok)
    bound = limit.bound_s(BUCKET_CHILDREN) + service  # the whole batch, one call a child
    what = f"{calls * per_call} tpm" if tokens else f"{calls} rpm"
    return {
        "limit": f"{what} bucket{'' if BUCKET_SCALE == 1 else f' x{BUCKET_SCALE:g}'}",
        "mode": f"unknown, {dialect or 'no'} headers",
        "provider": provider,
        "requests": len(ok) + limited,
        "ratio_of_limit": round(bound / span, 3),
        "share_429": round(limited / max(1, len(ok) + limited), 4),
        "children_failed": failed,
        "makespan_s": round(span, 2),
        "bound_s": round(bound, 2),
        "makespan_over_bound": round(span / bound, 3),
    }


UNKNOWN = (
    lambda: unknown_limit("openai", "openai", tokens=False),
    lambda: unknown_limit("anthropic", "anthropic", tokens=False),
    lambda: unknown_limit("openai", "openai", tokens=True),
    lambda: unknown_limit("openai", None, tokens=False),
)


def main(only_unknown: bool = False) -> list[dict[str, object]]:
    rows = []
    runs = [
        lambda: per_minute("openai", buckets=True),
        lambda: per_minute("openai", buckets=False),
        lambda: in_flight(capped=True),
        lambda: in_flight(capped=False),
    ]
    for run in [*([] if only_unknown else runs), *UNKNOWN]:
        t0 = time.perf_counter()
        row = run()
        row["seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
    for row in rows:
        row["bench"] = "ratelimit"
        if "makespan_s" in row:
            row["targets"] = {"children_failed": 0, "share_429_at_most": 0.05, "over_bound": 1.1}
        else:
            row["targets"] = {"ratio_of_limit": 0.9, "share_429_below": 0.02}
    return rows


def table(rows: list[dict[str, object]]) -> str:
    head = (
        f"{'limit':<18} {'mode':<26} {'provider':<10} {'requests':>8} {'ratio':>7} {'429s':>7}"
        f" {'failed':>6} {'makespan':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        share = float(r["share_429"])  # type: ignore[arg-type]
        span = f"{r['makespan_s']}s" if "makespan_s" in r else ""
        lines.append(
            f"{r['limit']!s:<18} {r['mode']!s:<26} {r['provider']!s:<10} {r['requests']!s:>8} "
            f"{r['ratio_of_limit']!s:>7} {share:>7.1%} {r.get('children_failed', '')!s:>6} "
            f"{span:>9}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    results = main(only_unknown="--unknown-only" in sys.argv)
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ratelimit-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {out}")
    print(json.dumps(results))  # last line: for tests/bench/run.py
