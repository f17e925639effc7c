"""A `kennel` command's peak memory, in a process of its own (a peak is never given back)."""

from __future__ import annotations

import subprocess
import sys

# the command's own process reports its peak RSS (VmHWM) as its last line
_CHILD = (
    "import sys; from kennel.cli import main; code = main(sys.argv[1:]);"
    "print([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]);"
    "sys.exit(code)"
)


def kennel_peak_rss_mib(arguments: list[str]) -> float:
    """MiB of peak RSS of ``kennel ARGUMENTS``; exits with its error output if it fails."""
    command = [sys.executable, "-c", _CHILD, *arguments]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kennel {arguments[0]} failed:\n{done.stderr[-2000:]}")
    return int(done.stdout.split()[-2]) / 1024


def peak_row(measure: str, large: float, small: float, goal: float) -> tuple[str, str, str]:
    """The (measure, value, goal) row of two peaks whose ratio should stay at most ``goal``."""
    ratio = large / small
    return (measure, f"{large:.0f} / {small:.0f} MiB ({ratio:.2f}x)",
            f"<= {goal:.2f}x ({'meets' if ratio <= goal else 'MISSES'})")  # fmt: skip
