"""What kennel's feature spec and leech's input spec share: stored as JSON, compared by field.

Both are frozen dataclasses written into features files and bundles (``to_json``) and read back
(``from_json``) to be checked against the spec a job expects (``differences``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Self


class JsonSpec:
    """A mixin for frozen dataclasses whose fields are JSON values; tuples come back as tuples."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Self:
        # JSON has no tuples: every top-level list was one (a nested value, e.g. a dict of
        # extras, is left as JSON gives it, as it was written)
        fields = json.loads(text)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})

    def differences(self, other: JsonSpec) -> list[str]:
        """Names and values of the fields that differ, for an error message."""
        mine, theirs = asdict(self), asdict(other)
        return [f"{k}: {mine[k]!r} != {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]
