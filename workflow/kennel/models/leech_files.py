"""leech's model files, read without executing code.

What leech 0.16.0 writes, and what is read here:

* **bundle, format 1** (``leech model bundle``): a dict ``{metadata, config, model}`` for a
  multiclass model (class names from ``metadata.label_map``, count from ``metadata.num_classes``)
  or ``{metadata, config, models: {pair: {...}}}`` for pairwise / one-vs-all sets of binary
  models. A model entry holds ``state_dict`` and optionally ``calibration`` (multiclass:
  temperature, matrix or Dirichlet scaling of the logits), ``cl_regression_head_state_dict``
  (charging-level head) or ``platt_a``/``platt_b`` (pair models).
* **bundle, format 3** (``--torchscript``): each pair stores ``exported_bytes``, a torch.export
  archive, and usually no state dict. ``torch.export.load`` is not used: it unpickles parts of
  the archive with ``weights_only=False``. Instead the archive's raw weight payloads are read as
  plain bytes (dtype, shape and strides from its JSON weight table) into kennel's own network;
  a payload the archive stores pickled is refused.
* **bundle, format 4** (``--vmap``): ``stacked_params``/``stacked_buffers`` with a leading model
  axis, plus ``platt_a``/``platt_b`` tensors; each pair's slice is its state dict.
* **checkpoint directory** (``leech model train``): ``config.json`` + ``model_best.pt``. The
  checkpoint pickles numpy arrays (RNG state); exactly numpy's array reconstructor, ``ndarray``
  and the dtype classes are allow-listed for it, nothing else.

Everything goes through ``torch.load(..., weights_only=True)`` on the CPU. Format 2 (TorchScript)
is refused (by :mod:`kennel.models.leech`, which builds the model): running it means running
its code.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kennel.errors import KennelError
from kennel.models.bundle import COMPILED_PREFIX, refused_unpickling

CONFIG_NAME = "config.json"
CHECKPOINT_NAME = "model_best.pt"
# torch.export's ScalarType codes (torch/_export/serde/schema.py) for the dtypes weights use
_EXPORT_DTYPES = {
    1: torch.uint8,
    2: torch.int8,
    3: torch.int16,
    4: torch.int32,
    5: torch.int64,
    6: torch.float16,
    7: torch.float32,
    8: torch.float64,
    12: torch.bool,
    13: torch.bfloat16,
}


def _numpy_globals() -> list[Any]:
    """The numpy types a leech checkpoint pickles (its saved RNG state): array reconstruction,
    ``ndarray``, ``dtype`` and numpy 2's per-dtype classes. Only numpy's own types."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct
    allowed: list[Any] = [_reconstruct, np.ndarray, np.dtype]
    # a checkpoint written under numpy 1.x names the reconstructor by its old module path
    allowed.append((_reconstruct, "numpy.core.multiarray._reconstruct"))
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        allowed += [
            cls
            for cls in vars(dtypes).values()
            if isinstance(cls, type) and issubclass(cls, np.dtype) and cls is not np.dtype
        ]
    return allowed


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    # torch's zip reader appends a paragraph about miniz to the one useful sentence
    line = text.splitlines()[0].split(" This is an internal miniz error")[0] if text else ""
    return line or type(error).__name__


def read_model_file(path: Path, *, allow_numpy: bool = False, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` with one-line, file-naming errors."""
    try:
        if allow_numpy:
            with torch.serialization.safe_globals(_numpy_globals()):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        message = str(error)
        if "global" not in message.lower() and "weights only" not in message.lower():
            raise KennelError(
                f"{path}: truncated or corrupt leech model file ({_first_line(error)})"
            ) from None
        raise refused_unpickling(path, error, "leech models are read weights-only") from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise KennelError(
            f"{path}: truncated or corrupt leech model file ({_first_line(error)})"
        ) from None
    except OSError as error:
        raise KennelError(
            f"{path}: cannot read leech model file ({error.strerror or error})"
        ) from None


def looks_like_leech_bundle(obj: Any) -> bool:
    if not isinstance(obj, dict) or obj.get("format") == "kennel-bundle":
        return False
    metadata, config = obj.get("metadata"), obj.get("config")
    return (
        isinstance(metadata, dict)
        and isinstance(config, dict)
        and any(key in obj for key in ("model", "models", "stacked_params"))
    )


def leech_metadata(path: str | os.PathLike) -> dict | None:
    """The metadata of the leech model at ``path`` (a bundle file's ``metadata``; ``{}`` for a
    checkpoint directory, which records none), or None when ``path`` is not a leech model.

    A kennel bundle (``format: "kennel-bundle"``) is not one. Unreadable files answer None; the
    loader says why. Only the pickled structure is read (mmap), not the tensor data, so the
    workflow can ask at parse time.
    """
    path = Path(path)
    if path.is_dir():
        leech = (path / CONFIG_NAME).is_file() or (path / CHECKPOINT_NAME).is_file()
        return {} if leech else None
    if not path.is_file():
        return None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        # a legacy (non-zip) torch file cannot be memory-mapped
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            return None
    return obj["metadata"] if looks_like_leech_bundle(obj) else None


def is_leech_bundle(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a leech model: a leech bundle file or a leech checkpoint directory."""
    return leech_metadata(path) is not None


def bundle_kind(path: str | os.PathLike) -> str:
    """``"leech"`` or ``"kennel"``, read from the bundle itself; a file that is neither (or is
    unreadable, or needs code execution to unpickle) fails with kennel's one-line errors."""
    if is_leech_bundle(path):
        return "leech"
    from kennel.models.bundle import load_bundle

    load_bundle(path)
    return "kennel"


def clean_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop torch.compile's ``_orig_mod.`` prefix and rename leech's old ``bn1``/``bn2``
    temporal-block norms to ``norm1``/``norm2``, as leech does when it loads."""
    cleaned = {}
    for key, value in state_dict.items():
        key = key.removeprefix(COMPILED_PREFIX)
        key = key.replace(".bn1.", ".norm1.").replace(".bn2.", ".norm2.")
        cleaned[key] = value
    return cleaned


def exported_state_dict(data: bytes, path: Path, pair: str) -> dict[str, torch.Tensor]:
    """Parameters and buffers of a torch.export archive, from its raw payloads (no unpickling)."""
    where = f"{path}: pair {pair!r}: exported program"
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
        configs = [n for n in names if n.endswith("/data/weights/model_weights_config.json")]
        if len(configs) != 1:
            raise KennelError(
                f"{where} has no weight table this kennel can read (refusing the pickled "
                "legacy layout: loading it would need code execution)"
            )
        root = configs[0][: -len("data/weights/model_weights_config.json")]
        table = json.loads(archive.read(configs[0]))["config"]
        byteorder_file = root + "byteorder"
        if byteorder_file in names and archive.read(byteorder_file).strip() != b"little":
            raise KennelError(f"{where} is big-endian; only little-endian archives are read")
        state_dict: dict[str, torch.Tensor] = {}
        for fqn, payload in table.items():
            if payload.get("use_pickle"):
                raise KennelError(
                    f"{where} stores weight {fqn!r} pickled; refusing to load a bundle that "
                    "needs code execution to unpickle"
                )
            meta = payload["tensor_meta"]
            dtype = _EXPORT_DTYPES.get(meta["dtype"])
            if dtype is None:
                raise KennelError(
                    f"{where}: weight {fqn!r} has unsupported dtype code {meta['dtype']}"
                )
            raw = archive.read(root + "data/weights/" + payload["path_name"])
            flat = (
                torch.frombuffer(bytearray(raw), dtype=dtype)
                if raw
                else torch.empty(0, dtype=dtype)
            )
            sizes = [int(s["as_int"]) for s in meta["sizes"]]
            strides = [int(s["as_int"]) for s in meta["strides"]]
            offset = int(meta["storage_offset"]["as_int"])
            state_dict[fqn] = torch.as_strided(flat, sizes, strides, offset).clone()
        return state_dict
    except KennelError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError, RuntimeError) as error:
        raise KennelError(f"{where} is unreadable ({_first_line(error)})") from None
