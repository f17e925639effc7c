"""One exception type for every problem a user can fix.

The CLI turns a :class:`KennelError` into a single line on stderr and a non-zero exit;
anything else is a bug and keeps its traceback.
"""


class KennelError(Exception):
    """Bad input or configuration, with a message that names the file and record."""


def fail(path, message: str, record: str | None = None) -> KennelError:
    """Build a one-line error naming ``path`` and, when known, the offending ``record``."""
    where = f"{path}" if record is None else f"{path}: {record}"
    return KennelError(f"{where}: {message}")
