"""leech models in kennel: read leech bundles and checkpoint directories without executing code.

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
is refused: running it means running its code.

Which post-processing applies follows ``leech predict``: calibration only for a multiclass
*bundle* (a checkpoint directory's ``calibration.json`` is not read by leech predict either),
Platt scaling only when a pairwise bundle is run as a whole, the charging head wherever its
weights are stored.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from kennel.errors import KennelError
from kennel.models.leech_arch import (
    SUPPORTED_ARCHITECTURES,
    ChargingHead,
    build_network,
    feature_width,
)

log = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
CHECKPOINT_NAME = "model_best.pt"
MULTICLASS, BINARY, PAIRWISE, ONE_VS_ALL = "multiclass", "binary", "pairwise", "one_vs_all"
SUPPORTED_FORMATS = (1, 3, 4)
DEFAULT_FEATURE_CHANNELS = (
    "dwell",
    "dwell_log",
    "dwell_mean",
    "dwell_std",
    "dwell_ratio",
    "level_mean",
    "level_median",
    "level_std",
    "level_range",
    "kmer_expected",
    "kmer_residual",
    "kmer_residual_abs",
)
_COMPILED_PREFIX = "_orig_mod."
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


# ---------------------------------------------------------------------------------------------
# reading files safely


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


def _torch_load(path: Path, *, allow_numpy: bool = False, mmap: bool = False) -> Any:
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
        # torch's message is a page long; its "Unsupported global" line is the useful part
        reasons = [line.strip() for line in message.splitlines() if "global" in line.lower()]
        reason = (
            reasons[0].removeprefix("WeightsUnpickler error: ") if reasons else "not weights-only"
        )
        raise KennelError(
            f"{path}: refusing to load a bundle that needs code execution to unpickle "
            f"({reason}); leech models are read weights-only"
        ) from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise KennelError(
            f"{path}: truncated or corrupt leech model file ({_first_line(error)})"
        ) from None
    except OSError as error:
        raise KennelError(
            f"{path}: cannot read leech model file ({error.strerror or error})"
        ) from None


def _looks_like_leech_bundle(obj: Any) -> bool:
    if not isinstance(obj, dict) or obj.get("format") == "kennel-bundle":
        return False
    metadata, config = obj.get("metadata"), obj.get("config")
    return (
        isinstance(metadata, dict)
        and isinstance(config, dict)
        and any(key in obj for key in ("model", "models", "stacked_params"))
    )


def is_leech_bundle(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a leech model: a leech bundle file or a leech checkpoint directory.

    A kennel bundle (``format: "kennel-bundle"``) is not. Unreadable files answer False; the
    loader says why.
    """
    path = Path(path)
    if path.is_dir():
        return (path / CONFIG_NAME).is_file() or (path / CHECKPOINT_NAME).is_file()
    if not path.is_file():
        return False
    try:
        # mmap: only the pickled structure is read, not the tensor data
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            return False
    return _looks_like_leech_bundle(obj)


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
        key = key.removeprefix(_COMPILED_PREFIX)
        key = key.replace(".bn1.", ".norm1.").replace(".bn2.", ".norm2.")
        cleaned[key] = value
    return cleaned


def _exported_state_dict(data: bytes, path: Path, pair: str) -> dict[str, torch.Tensor]:
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


# ---------------------------------------------------------------------------------------------
# what a model file holds


@dataclass(frozen=True)
class Calibration:
    """leech's multiclass calibration of logits, applied before softmax.

    temperature: ``logits / T``; matrix: ``logits @ W.T + b``; dirichlet:
    ``alpha * log_softmax(logits) + beta``.
    """

    method: str
    temperature: float | None = None
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    @classmethod
    def from_leech(cls, params: Mapping[str, Any], where: str) -> Calibration:
        method = params.get("method")
        try:
            if method == "temperature":
                return cls(method, temperature=float(params["temperature"]))
            if method == "matrix":
                return cls(
                    method,
                    weight=torch.tensor(params["W"], dtype=torch.float32),
                    bias=torch.tensor(params["b"], dtype=torch.float32),
                )
            if method == "dirichlet":
                return cls(
                    method,
                    weight=torch.tensor(params["alpha"], dtype=torch.float32),
                    bias=torch.tensor(params["beta"], dtype=torch.float32),
                )
        except (KeyError, TypeError, ValueError) as error:
            raise KennelError(f"{where}: malformed {method} calibration ({error})") from None
        raise KennelError(
            f"{where}: unknown calibration method {method!r} (temperature, matrix, dirichlet)"
        )

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.method == "temperature":
            return logits / self.temperature
        weight = self.weight.to(logits.device, logits.dtype)
        bias = self.bias.to(logits.device, logits.dtype)
        if self.method == "matrix":
            return logits @ weight.T + bias
        return weight * torch.log_softmax(logits, dim=-1) + bias

    def describe(self) -> str:
        if self.method == "temperature":
            return f"temperature (T = {self.temperature:.6g})"
        return f"{self.method} ({tuple(self.weight.shape)} + {tuple(self.bias.shape)})"


@dataclass
class LeechNetwork:
    """One trained network of a leech model file, in eval mode on the CPU."""

    name: str
    module: nn.Module
    platt: tuple[float, float] | torch.Tensor | None = None
    charging_head: nn.Module | None = None
    best_val_acc: float | None = None
    best_epoch: int | None = None

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


@dataclass
class ChunkScores:
    """What a leech model says about a batch of chunks.

    ``logits`` is what leech turns into probabilities, ``(batch, outputs)``: a multiclass
    model's class logits after calibration (the tags softmax them); a pairwise or one-vs-all
    bundle's one column per pair, ``LeechModel.pairs`` order, after Platt scaling; a single
    binary model's one column (the tags sigmoid both). ``charging`` is the charging-level head's
    output in [0, 1] ``(batch,)`` for a multiclass model that has one (leech reads it nowhere
    else).
    """

    logits: torch.Tensor
    charging: torch.Tensor | None = None


@dataclass
class LeechModel:
    """A leech bundle or checkpoint directory, read and built into kennel's own networks."""

    path: Path
    source: str  # "bundle" or "checkpoint"
    format_version: int | None  # bundle format; None for a checkpoint directory
    kind: str  # multiclass, binary, pairwise or one_vs_all
    architecture: str
    config: dict[str, Any]
    metadata: dict[str, Any]
    class_names: tuple[str, ...]
    networks: dict[str, LeechNetwork]
    pair_labels: dict[str, tuple[str, str]] = field(default_factory=dict)
    calibration: Calibration | None = None
    dwell_template_table: bytes | None = None

    @property
    def pairs(self) -> tuple[str, ...]:
        """Network names in output-column order (pair names for a pairwise bundle)."""
        return tuple(self.networks)

    @property
    def leech_version(self) -> str | None:
        return self.metadata.get("leech_version") or self.config.get("leech_version")

    @property
    def input_shapes(self) -> dict[str, tuple[int, int]]:
        """Per-chunk shape of each input, without the batch axis."""
        config = self.config
        signal_len, kmer_len = int(config["signal_len"]), int(config["kmer_len"])
        network = next(iter(self.networks.values())).module
        if network.seq_encoding == "signal_kmer":
            left, right = (int(c) for c in config.get("signal_kmer_context") or (4, 4))
            sequence = (4 * (left + right + 1), signal_len)
        else:
            sequence = (4, kmer_len)
        num_features = int(config.get("num_features") or 5)
        return {
            "signal": (network.signal_in_channels, signal_len),
            "sequence": sequence,
            "features": (num_features, feature_width(self.architecture, config)),
        }

    def pair_classes(self, pair: str) -> tuple[str, str]:
        """``(label 0, label 1)`` class names of a pair network: the bundle's ``pair_labels``,
        else the pair name split at its first ``_`` (leech's fallback)."""
        if pair in self.pair_labels:
            return self.pair_labels[pair]
        negative, _, positive = pair.partition("_")
        return negative, positive

    def select_pair(self, pair: str) -> LeechModel:
        """One network of a pairwise bundle as a single binary model (``leech predict --pair``):
        leech applies no Platt scaling on that path, so neither does this."""
        if self.kind not in (PAIRWISE, ONE_VS_ALL):
            raise KennelError(f"{self.path}: --pair needs a pairwise bundle, this is {self.kind}")
        if pair not in self.networks:
            raise KennelError(
                f"{self.path}: no pair {pair!r} in bundle (pairs: {', '.join(self.networks)})"
            )
        network = replace(self.networks[pair], platt=None)
        return replace(
            self,
            kind=BINARY,
            class_names=self.pair_classes(pair),
            networks={pair: network},
        )

    @torch.inference_mode()
    def score(
        self, signal: torch.Tensor, sequence: torch.Tensor, features: torch.Tensor
    ) -> ChunkScores:
        """Run every network on a batch and apply leech's post-processing (see ChunkScores)."""
        logits, charging = self.module()(signal, sequence, features)
        return ChunkScores(logits, charging)

    def module(self) -> LeechScorer:
        """The whole model as one ``nn.Module`` (what classify moves to the device and
        compiles): ``forward(signal, sequence, features) -> (logits, charging or None)``."""
        return LeechScorer(self)


class LeechScorer(nn.Module):
    """A leech model's networks and leech predict's post-processing, as one module.

    Multiclass: the network's class logits, calibrated, and the charging head's output when
    there is one. Pairwise / one-vs-all / binary: one column per network, each Platt-scaled
    when the bundle carries it.
    """

    def __init__(self, model: LeechModel):
        super().__init__()
        self.multiclass = model.kind == MULTICLASS
        self.networks = nn.ModuleDict({name: n.module for name, n in model.networks.items()})
        first = next(iter(model.networks.values()))
        self.charging_head = first.charging_head if self.multiclass else None
        self.calibration = model.calibration if self.multiclass else None
        # Platt (scale, offset) per network as buffers, so they move with the module
        for index, network in enumerate(model.networks.values()):
            platt = network.platt
            if platt is not None:
                self.register_buffer(
                    f"platt_{index}", torch.as_tensor(platt, dtype=torch.float32).reshape(2)
                )
        self.has_platt = [n.platt is not None for n in model.networks.values()]

    def forward(self, signal, sequence, features):
        sequence = sequence.to(torch.float32)
        if self.multiclass:
            network = next(iter(self.networks.values()))
            representation = network.representation(signal, sequence, features)
            logits = network.head(representation)
            if self.calibration is not None:
                logits = self.calibration.apply(logits)
            charging = (
                self.charging_head(representation) if self.charging_head is not None else None
            )
            return logits, charging
        columns = []
        for index, network in enumerate(self.networks.values()):
            logits = network(signal, sequence, features)
            if self.has_platt[index]:
                scale, offset = getattr(self, f"platt_{index}")
                logits = scale * logits + offset
            columns.append(logits.reshape(-1))
        return torch.stack(columns, dim=1), None


# ---------------------------------------------------------------------------------------------
# loading


def load_leech_model(path: str | os.PathLike, pair: str | None = None) -> LeechModel:
    """Read a leech bundle file or checkpoint directory and build its networks (eval, CPU).

    With ``pair``, a pairwise bundle is narrowed to that one binary network
    (``leech predict --bundle B --pair NAME``).
    """
    path = Path(path)
    if path.is_dir():
        model = _load_checkpoint(path)
    elif path.is_file():
        bundle = _torch_load(path)
        if isinstance(bundle, dict) and bundle.get("format") == "kennel-bundle":
            raise KennelError(f"{path}: a kennel bundle, not a leech model")
        if not _looks_like_leech_bundle(bundle):
            raise KennelError(
                f"{path}: not a leech bundle (expected a dict with metadata, config and "
                "model/models)"
            )
        model = _load_bundle(bundle, path)
    else:
        raise KennelError(f"{path}: leech model not found")
    return model.select_pair(pair) if pair is not None else model


def _check_architecture(name: Any, path: Path) -> str:
    if name not in SUPPORTED_ARCHITECTURES:
        raise KennelError(
            f"{path}: leech architecture {name!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    return name


def _class_names(config: Mapping[str, Any], num_out: int) -> tuple[str, ...]:
    """Class names in label-index order; leech writes the index itself when it has no name.
    A single-output (binary) model has two classes, label 0 and label 1."""
    count = max(num_out, 2)
    label_map = config.get("label_map")
    by_index = (
        {int(index): str(name) for name, index in label_map.items()}
        if isinstance(label_map, Mapping)
        else {}
    )
    return tuple(by_index.get(i, str(i)) for i in range(count))


def _build(
    architecture: str,
    config: Mapping[str, Any],
    state_dict: Mapping[str, Any],
    where: str,
) -> nn.Module:
    try:
        module = build_network(architecture, config)
    except (KeyError, TypeError, ValueError) as error:
        raise KennelError(f"{where}: config does not describe a {architecture} ({error})") from None
    if not isinstance(state_dict, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state_dict.values()
    ):
        raise KennelError(f"{where}: state dict is not a mapping of tensors")
    _load_strict(
        module, clean_state_dict(state_dict), f"{where}: weights do not fit {architecture}"
    )
    return module.eval()


def _load_strict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], prefix: str) -> None:
    expected = module.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    wrong = [
        f"{k} {tuple(state_dict[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state_dict and tuple(state_dict[k].shape) != tuple(v.shape)
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing, e.g. {missing[0]}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected, e.g. {unexpected[0]}")
    if wrong:
        problems.append(f"{len(wrong)} of another shape, e.g. {wrong[0]}")
    if problems:
        raise KennelError(f"{prefix} ({'; '.join(problems)})")
    module.load_state_dict(state_dict, strict=True)


def _charging_head(state_dict: Any, module: nn.Module, where: str) -> nn.Module | None:
    if state_dict is None:
        return None
    head = ChargingHead(module.representation_width)
    if not isinstance(state_dict, Mapping):
        raise KennelError(f"{where}: charging head state is not a state dict")
    _load_strict(head, clean_state_dict(state_dict), f"{where}: charging head does not fit")
    return head.eval()


def _optional_float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _load_checkpoint(directory: Path) -> LeechModel:
    config_path = directory / CONFIG_NAME
    if not config_path.is_file():
        raise KennelError(f"{directory}: leech checkpoint directory has no {CONFIG_NAME}")
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise KennelError(f"{config_path}: not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise KennelError(f"{config_path}: not a leech model config (expected a JSON object)")
    architecture = _check_architecture(config.get("model_name"), config_path)
    checkpoint_path = directory / CHECKPOINT_NAME
    if not checkpoint_path.is_file():
        raise KennelError(f"{directory}: leech checkpoint directory has no {CHECKPOINT_NAME}")
    checkpoint = _torch_load(checkpoint_path, allow_numpy=True)
    if not isinstance(checkpoint, dict) or "model_state_dict" not in checkpoint:
        raise KennelError(f"{checkpoint_path}: not a leech checkpoint (no model_state_dict)")
    num_out = int(config.get("num_out") or 1)
    module = _build(architecture, config, checkpoint["model_state_dict"], str(checkpoint_path))
    network = LeechNetwork(
        name="model",
        module=module,
        charging_head=_charging_head(
            checkpoint.get("cl_regression_head_state_dict"), module, str(checkpoint_path)
        ),
        best_val_acc=_optional_float(checkpoint.get("best_val_acc")),
        best_epoch=checkpoint.get("best_epoch"),
    )
    return LeechModel(
        path=directory,
        source="checkpoint",
        format_version=None,
        kind=MULTICLASS if num_out > 1 else BINARY,
        architecture=architecture,
        config=config,
        metadata={"leech_version": config.get("leech_version")},
        class_names=_class_names(config, num_out),
        networks={"model": network},
    )


def _load_bundle(bundle: dict[str, Any], path: Path) -> LeechModel:
    metadata = dict(bundle["metadata"])
    config = dict(bundle["config"])
    version = metadata.get("format_version", 1)
    if version not in SUPPORTED_FORMATS:
        detail = " (TorchScript: running it would run its code)" if version == 2 else ""
        raise KennelError(
            f"{path}: leech bundle format {version!r} is not supported{detail} "
            f"(supported: {', '.join(map(str, SUPPORTED_FORMATS))})"
        )
    architecture = _check_architecture(
        config.get("model_name") or metadata.get("architecture"), path
    )
    comparison = metadata.get("comparison_type")
    template = bundle.get("dwell_template_table_bytes")

    if comparison == MULTICLASS:
        entry = bundle.get("model")
        if not isinstance(entry, dict) or "state_dict" not in entry:
            raise KennelError(f"{path}: multiclass leech bundle has no model state dict")
        label_map = metadata.get("label_map") or {}
        config["label_map"] = label_map
        config["num_out"] = int(metadata.get("num_classes") or len(label_map))
        module = _build(architecture, config, entry["state_dict"], str(path))
        calibration = entry.get("calibration")
        network = LeechNetwork(
            name="model",
            module=module,
            charging_head=_charging_head(
                entry.get("cl_regression_head_state_dict"), module, str(path)
            ),
            best_val_acc=_optional_float(entry.get("best_val_acc")),
            best_epoch=entry.get("best_epoch"),
        )
        return LeechModel(
            path=path,
            source="bundle",
            format_version=version,
            kind=MULTICLASS,
            architecture=architecture,
            config=config,
            metadata=metadata,
            class_names=_class_names(config, config["num_out"]),
            networks={"model": network},
            calibration=(
                Calibration.from_leech(calibration, str(path))
                if isinstance(calibration, Mapping) and config["num_out"] > 1
                else None
            ),
            dwell_template_table=template,
        )

    pairs = metadata.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        raise KennelError(f"{path}: leech bundle metadata lists no pairs")
    if int(config.get("num_out") or 1) != 1:
        raise KennelError(
            f"{path}: pair networks must have one output (num_out 1), config says "
            f"{config.get('num_out')}"
        )
    networks = {}
    for index, pair in enumerate(pairs):
        where = f"{path}: pair {pair!r}"
        entry, state_dict, platt = _pair_weights(bundle, version, pair, index, path)
        networks[pair] = LeechNetwork(
            name=pair,
            module=_build(architecture, config, state_dict, where),
            platt=platt,
            best_val_acc=_optional_float(entry.get("best_val_acc")),
            best_epoch=entry.get("best_epoch"),
        )
    pair_labels = {
        str(pair): (str(labels[0]), str(labels[1]))
        for pair, labels in (metadata.get("pair_labels") or {}).items()
        if isinstance(labels, (list, tuple)) and len(labels) == 2
    }
    kind = PAIRWISE if comparison == PAIRWISE else ONE_VS_ALL
    model = LeechModel(
        path=path,
        source="bundle",
        format_version=version,
        kind=kind,
        architecture=architecture,
        config=config,
        metadata=metadata,
        class_names=(),
        networks=networks,
        pair_labels=pair_labels,
        dwell_template_table=template,
    )
    model.class_names = _vote_classes(model)
    return model


def _pair_weights(
    bundle: Mapping[str, Any], version: int, pair: str, index: int, path: Path
) -> tuple[Mapping[str, Any], Mapping[str, Any], Any]:
    """``(entry, state dict, Platt parameters)`` of one pair network of a bundle."""
    if version == 4:
        params, buffers = bundle.get("stacked_params"), bundle.get("stacked_buffers") or {}
        if not isinstance(params, Mapping):
            raise KennelError(f"{path}: format-4 leech bundle has no stacked_params")
        state_dict = {k: v[index] for k, v in {**params, **buffers}.items()}
        scale, offset = bundle.get("platt_a"), bundle.get("platt_b")
        # leech scales format-4 logits with these float32 tensors, identity included
        platt = (scale[index], offset[index]) if scale is not None and offset is not None else None
        return {}, state_dict, platt
    models = bundle.get("models")
    if not isinstance(models, Mapping) or pair not in models:
        raise KennelError(f"{path}: leech bundle lists pair {pair!r} but holds no model for it")
    entry = models[pair]
    if "state_dict" in entry:
        state_dict = entry["state_dict"]
    elif "exported_bytes" in entry:
        state_dict = _exported_state_dict(bytes(entry["exported_bytes"]), path, pair)
    else:
        raise KennelError(f"{path}: pair {pair!r} has neither a state dict nor exported weights")
    scale, offset = entry.get("platt_a"), entry.get("platt_b")
    platt = (float(scale), float(offset)) if scale is not None and offset is not None else None
    return entry, state_dict, platt


def _vote_classes(model: LeechModel) -> tuple[str, ...]:
    """Class names a pairwise / one-vs-all bundle can call, in first-seen order."""
    names: list[str] = []
    for pair in model.networks:
        classes = model.pair_classes(pair)
        for name in classes if model.kind == PAIRWISE else classes[:1]:
            if name not in names:
                names.append(name)
    return tuple(names)


# ---------------------------------------------------------------------------------------------
# describing


def describe_leech_model(model: LeechModel) -> str:
    """Human-readable summary for ``kennel bundle-info``."""
    config, metadata = model.config, model.metadata
    shapes = model.input_shapes
    if model.source == "bundle":
        source = f"leech bundle, format {model.format_version}"
        if metadata.get("bundle_version"):
            source += f", bundle version {metadata['bundle_version']}"
    else:
        source = "leech checkpoint directory (config.json + model_best.pt)"
    lines = [
        f"source: {source}",
        f"leech version: {model.leech_version or 'unknown'}",
        f"architecture: {model.architecture}",
    ]
    if model.kind == MULTICLASS:
        lines.append(f"kind: multiclass ({len(model.class_names)} classes, softmax)")
        lines.append(f"classes: {', '.join(model.class_names)}")
    elif model.kind == BINARY:
        lines.append("kind: binary (one sigmoid output = P(second class))")
        lines.append(f"classes: {', '.join(model.class_names)}")
    else:
        count = len(model.networks)
        lines.append(f"kind: {model.kind} ({count} binary network{'s' * (count != 1)}, votes)")
        lines.append(f"classes: {', '.join(model.class_names)}")
        for pair in model.networks:
            negative, positive = model.pair_classes(pair)
            origin = "pair_labels" if pair in model.pair_labels else "split from pair name"
            lines.append(f"  pair {pair}: {negative} (0) vs {positive} (1), {origin}")
    for network in model.networks.values():
        trained = []
        if network.best_epoch is not None:
            trained.append(f"best epoch {network.best_epoch}")
        if network.best_val_acc is not None:
            trained.append(f"val acc {network.best_val_acc:.3f}")
        extra = f", {', '.join(trained)}" if trained else ""
        lines.append(f"network {network.name}: {network.parameter_count:,} parameters{extra}")
        if network.platt is not None:
            scale, offset = (float(v) for v in network.platt)
            lines.append(f"  Platt scaling: a = {scale:.6g}, b = {offset:.6g}")
        if network.charging_head is not None:
            lines.append("  charging-level head: yes (pc tag)")
    lines.append(f"calibration: {model.calibration.describe() if model.calibration else 'none'}")
    channels = config.get("feature_channels") or list(DEFAULT_FEATURE_CHANNELS)
    start, end = config.get("feature_start"), config.get("feature_end")
    width = shapes["features"][1]
    if model.architecture.startswith("TCN") and start is not None and end is not None:
        window = f"bases {int(start):+d}..{int(end):+d}"
    elif model.architecture.startswith("TCN"):  # a config from before the window was recorded
        window = f"{width} bases (k-mer window widened by the dwell margin)"
    else:
        window = f"the {width}-base k-mer window"
    context = config.get("signal_kmer_context") or (4, 4)
    encoding = config.get("seq_encoding") or "base_onehot"
    if encoding == "signal_kmer":
        encoding += f" (context {context[0]},{context[1]})"
    # leech refines whenever the config asks or the signal has a k-mer residual channel
    refine = "on" if config.get("refine_signal_map", True) or shapes["signal"][0] > 1 else "off"
    lines += [
        "inputs:",
        f"  signal: {shapes['signal']} (signal_len {config.get('signal_len')}, "
        f"norm {config.get('signal_norm', 'median_mad')}, "
        f"reversed {config.get('reverse_signal', True)})",
        f"  sequence: {shapes['sequence']} {encoding}",
        f"  features: {shapes['features']}, {window} around the focus base "
        f"(dwell_offset {config.get('dwell_offset', 0)})",
        f"  feature channels: {', '.join(channels)}",
        f"motif: {config.get('motif')} offset {config.get('motif_offset', 0)} "
        f"(anchor {config.get('anchor', 'reference')}, base_justify "
        f"{config.get('base_justify', 'center')}, require_query_mapping "
        f"{config.get('require_query_mapping', True)})",
        f"signal-map refinement: {refine} (scale_iters {config.get('refine_scale_iters', 2)}, "
        f"half_bandwidth {config.get('refine_half_bandwidth', 5)}, "
        f"kmer_center_idx {config.get('refine_kmer_center_idx', -1)})",
        f"k-mer table sha256: {config.get('kmer_table_sha256') or 'not recorded'}",
        "dwell template: "
        + (
            f"embedded ({len(model.dwell_template_table)} bytes)"
            if model.dwell_template_table
            else (config.get("dwell_template_table") or "none")
        ),
    ]
    if metadata.get("created_at"):
        lines.append(f"created: {metadata['created_at']}")
    return "\n".join(lines)
