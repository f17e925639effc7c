"""The bundle: one file that carries a model, its hyperparameters and its contract.

A bundle is a plain dict of tensors, strings and numbers saved with ``torch.save`` and read
back with ``torch.load(weights_only=True)``, so loading one never executes code. Both arms use
it: the tRNA classifier and the SNP arm's sequence-to-coverage models.
"""

from __future__ import annotations

import datetime
import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from kennel import __version__
from kennel.errors import KennelError
from kennel.io.atomic import atomic_output

BUNDLE_FORMAT = "kennel-bundle"
FORMAT_VERSION = 1
COMPILED_PREFIX = "_orig_mod."  # what torch.compile puts before every state-dict key

_ARCHITECTURES: dict[str, Callable[..., torch.nn.Module]] = {}


def register_architecture(name: str):
    """Class decorator: make ``name`` buildable from a bundle's hyperparameters."""

    def decorate(cls):
        _ARCHITECTURES[name] = cls
        cls.architecture = name
        return cls

    return decorate


def strip_compiled_prefix(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the ``_orig_mod.`` prefix that ``torch.compile`` adds to every key."""
    return {
        key.removeprefix(COMPILED_PREFIX): value.detach().cpu().clone()
        for key, value in state_dict.items()
    }


def save_bundle(
    path: str | os.PathLike,
    model: torch.nn.Module,
    hyperparameters: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    extra_state: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> None:
    """Write ``model`` as a bundle, atomically.

    ``metadata`` carries the model's contract (class names, feature spec, targets);
    ``extra_state`` optional heads saved as their own state dicts.
    """
    architecture = getattr(model, "architecture", None) or getattr(
        getattr(model, "_orig_mod", None), "architecture", None
    )
    if architecture not in _ARCHITECTURES:
        raise KennelError(
            f"{path}: model class {type(model).__name__} is not a registered architecture"
        )
    bundle = {
        "format": BUNDLE_FORMAT,
        "format_version": FORMAT_VERSION,
        "architecture": architecture,
        "hyperparameters": dict(hyperparameters),
        "state_dict": strip_compiled_prefix(model.state_dict()),
        "extra_state": {
            name: strip_compiled_prefix(sd) for name, sd in (extra_state or {}).items()
        },
        "metadata": dict(metadata or {}),
        "provenance": {
            "kennel_version": __version__,
            "torch_version": str(torch.__version__),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            **dict(provenance or {}),
        },
    }
    with atomic_output(path) as temporary:
        torch.save(bundle, temporary)


def load_bundle(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a bundle without executing any code from it."""
    path = Path(path)
    if not path.is_file():
        raise KennelError(f"{path}: model bundle not found")
    try:
        bundle = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise refused_unpickling(
            path, error, "only weights-only bundles written by kennel are accepted"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as error:
        raise KennelError(f"{path}: not a readable model bundle ({error})") from None
    if not isinstance(bundle, dict) or bundle.get("format") != BUNDLE_FORMAT:
        raise KennelError(f"{path}: not a kennel bundle (missing format marker {BUNDLE_FORMAT!r})")
    version = bundle.get("format_version")
    if version != FORMAT_VERSION:
        raise KennelError(
            f"{path}: bundle format version {version!r} is not supported "
            f"(this kennel reads version {FORMAT_VERSION})"
        )
    if bundle.get("architecture") not in _ARCHITECTURES:
        _import_architectures()
    if bundle.get("architecture") not in _ARCHITECTURES:
        known = ", ".join(sorted(_ARCHITECTURES))
        raise KennelError(
            f"{path}: unknown architecture {bundle.get('architecture')!r} (known: {known})"
        )
    return bundle


def build_model(bundle: Mapping[str, Any], path: str | os.PathLike = "<bundle>") -> torch.nn.Module:
    """Instantiate the bundle's architecture and load its weights, in eval mode."""
    cls = _ARCHITECTURES[bundle["architecture"]]
    try:
        model = cls(**bundle["hyperparameters"])
        model.load_state_dict(bundle["state_dict"], strict=True)
    except (TypeError, RuntimeError) as error:
        message = str(error).strip().splitlines()[0]
        raise KennelError(
            f"{path}: weights do not fit architecture {bundle['architecture']!r} ({message})"
        ) from None
    return model.eval()


def describe_bundle(bundle: Mapping[str, Any]) -> str:
    """Human-readable summary for ``kennel bundle-info``."""
    n_parameters = sum(t.numel() for t in bundle["state_dict"].values())
    lines = [
        f"format: {bundle['format']} v{bundle['format_version']}",
        f"architecture: {bundle['architecture']}",
        f"parameters: {n_parameters:,}",
        "hyperparameters:",
        *(f"  {k}: {v}" for k, v in sorted(bundle["hyperparameters"].items())),
        f"extra heads: {', '.join(sorted(bundle['extra_state'])) or 'none'}",
        "metadata:",
        *(f"  {k}: {v}" for k, v in sorted(bundle["metadata"].items())),
        "provenance:",
        *(f"  {k}: {v}" for k, v in sorted(bundle["provenance"].items())),
    ]
    return "\n".join(lines)


def _import_architectures() -> None:
    """Import the modules that register architectures (lazily: they pull in torch.nn code)."""
    import importlib

    for module in ("kennel.models.motif", "kennel.models.trna_classifier"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise


def refused_unpickling(path: Path, error: pickle.UnpicklingError, accepted: str) -> KennelError:
    """The one-line error for a model file that ``weights_only=True`` refused to unpickle."""
    # torch's message is a page long; its "Unsupported global" line is the useful part
    reasons = [line.strip() for line in str(error).splitlines() if "global" in line.lower()]
    reason = reasons[0].removeprefix("WeightsUnpickler error: ") if reasons else "not weights-only"
    return KennelError(
        f"{path}: refusing to load a bundle that needs code execution to unpickle "
        f"({reason}); {accepted}"
    )
