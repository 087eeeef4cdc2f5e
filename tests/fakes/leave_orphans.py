#!/usr/bin/env python3
"""Leaves two orphans (tests/test_agents.py): grandchildren whose parent exits at once, so they
become the owner's children (it is their subreaper). One, in this session, exits as soon as it
is orphaned; one, in a session of its own, waits to be ended. Then this process exits, or with
--stay waits to be stopped."""

import os
import sys
import time


def orphan(own_session: bool) -> int:
    read, write = os.pipe()
    parent = os.fork()
    if parent:
        os.waitpid(parent, 0)
        return int(os.read(read, 32))
    pid = os.fork()
    if pid:
        os.write(write, str(pid).encode())
        os._exit(0)
    if own_session:
        os.setsid()
        while True:  # until the owner ends it with the rest of the tree
            time.sleep(1)
    while os.getppid() == parent:
        time.sleep(0.01)
    os._exit(0)


first, second = orphan(False), orphan(True)
print(f"root {os.getpid()} orphans {first} {second}", flush=True)
while "--stay" in sys.argv:
    time.sleep(1)
