"""Command children: a route that runs each task as a process (an agent CLI or any program),
supervised like a model child. `child.py` runs it; the other modules have one job each."""
