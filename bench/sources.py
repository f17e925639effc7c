"""What a cached benchmark input depends on, for its cache key."""

from pathlib import Path


def simulator_sources() -> list[Path]:
    """Every module of the simulator package: a cached simulation is remade when any changes
    (the whole package, so a module split off later is not missed)."""
    import kennel.sim

    return sorted(Path(kennel.sim.__file__).parent.glob("*.py"))
