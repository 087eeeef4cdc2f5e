"""argv templates: `{goal}`, `{context}`, `{id}`, `{workspace}` (and for a resume, `{session}`
and `{message}`) substituted inside their own argument, never through a shell."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def expand(template: Iterable[str], values: Mapping[str, str]) -> list[str]:
    """The argv for one run. The settings checked every placeholder, so each is in `values`;
    a value with spaces, quotes or `;` stays one argument, as given."""
    return [arg.format_map(values) for arg in template]
