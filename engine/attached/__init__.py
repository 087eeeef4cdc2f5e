"""A batch whose owner is another process: read, commanded and started from outside it.

The owner process runs the batch and writes the state folder; everything else is a client of
that folder, through this package: the attached TUI (`StoreView`, the same `EngineView` as an
in-process engine), the command line's `steer/stop/pause/continue/limits/wait` (`Client`),
`ls`, `report` and `logs` (the store read), and `run`, which starts an owner in the background
(`start_owner`). Scripts use the same.

    view.py     StoreView: snapshots read from the store, commands sent through it
    reading.py  one batch read again and again, with the owner's live figures merged in
    client.py   commands recorded for the owner and followed until settled; the owner's state
    spawn.py    an owner process started in the background, and known to have started
    watch.py    waking a reader when files change (watchfiles, or polling)
    store.py    the state folder's batches and reports, read from outside their owners

Import from the module you need: each command of the command line loads only its own.
"""
