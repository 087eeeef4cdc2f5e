"""The `[ray]` table: the cluster a batch's children run on with `[engine] executor = "ray"`."""

from __future__ import annotations

from typing import Any

from flightdeck.engine.inputs.bounds import (
    MAX_OBJECT_STORE_MB,
    MAX_WORKERS_PER_NODE,
    MIN_OBJECT_STORE_MB,
)
from flightdeck.engine.inputs.settings.checks import Table, ValueChecks
from flightdeck.engine.inputs.settings.values import MAX_CONCURRENT, RaySettings

RAY_KEYS = ("address", "num_cpus", "workers_per_node", "object_store_mb")
RAY_CLIENT = (
    "ray:// (Ray Client) is not supported: run flightdeck on a node of the cluster with "
    'address = "auto" (or RAY_ADDRESS set to the head\'s host:port)'
)


def read_ray(checks: ValueChecks, table: Table) -> RaySettings:
    """`[ray]`, each value checked (file, line and key in the error)."""
    checks.known(("ray",), table, RAY_KEYS)
    values: dict[str, Any] = {"line": checks.locator.line("ray")}
    if "address" in table:
        key = ("ray", "address")
        address = checks.string(key, table["address"]).strip()
        if address.startswith("ray://"):
            # Ray Client needs `ray[client]`, which the extra does not install, and Ray scopes
            # it to interactive shells; an owner on a node of the cluster joins with "auto".
            raise checks.error(key, RAY_CLIENT)
        if address not in ("local", "auto"):
            # A head's host:port is the natural next try; Ray's "auto" takes it from RAY_ADDRESS.
            raise checks.error(
                key,
                f'expected "local" or "auto", got {address!r} (to join a running cluster by its '
                'address: address = "auto", with RAY_ADDRESS=host:port of its head set for '
                "flightdeck)",
            )
        values["address"] = address
        values["address_line"] = checks.locator.line(*key)
    if "num_cpus" in table:
        values["num_cpus"] = checks.integer(
            ("ray", "num_cpus"), table["num_cpus"], 1, MAX_CONCURRENT
        )
    if "workers_per_node" in table:
        key = ("ray", "workers_per_node")
        values["workers_per_node"] = checks.integer(key, table[key[1]], 1, MAX_WORKERS_PER_NODE)
    if "object_store_mb" in table:
        key = ("ray", "object_store_mb")
        values["object_store_mb"] = checks.integer(
            key, table[key[1]], MIN_OBJECT_STORE_MB, MAX_OBJECT_STORE_MB
        )
    if values.get("address") == "auto":
        # They size the cluster "local" starts; a running one was sized by its `ray start`.
        for name, flag in (
            ("num_cpus", "--num-cpus"),
            ("object_store_mb", "--object-store-memory"),
        ):
            if name in table:
                raise checks.error(
                    ("ray", name),
                    f'sets the cluster address = "local" starts, not one "auto" joins: that '
                    f"one's is set where it started (`ray start {flag}` on each node); remove it",
                )
    return RaySettings(**values)
