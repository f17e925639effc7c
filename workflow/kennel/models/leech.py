"""leech models in kennel: a leech bundle or checkpoint directory loaded as a
:class:`~kennel.models.leech_model.LeechModel`.

What leech 0.16.0 writes, and how it is read without executing code:
:mod:`kennel.models.leech_files`. The model this builds: :mod:`kennel.models.leech_model`.

Which post-processing applies follows ``leech predict``: calibration only for a multiclass
*bundle* (a checkpoint directory's ``calibration.json`` is not read by leech predict either),
Platt scaling only when a pairwise bundle is run as a whole, the charging head wherever its
weights are stored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kennel.errors import KennelError
from kennel.models.leech_arch import build_network
from kennel.models.leech_defaults import (
    SUPPORTED_ARCHITECTURES,
)
from kennel.models.leech_files import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    clean_state_dict,
    exported_state_dict,
    looks_like_leech_bundle,
    read_model_file,
)
from kennel.models.leech_model import (
    BINARY,
    MULTICLASS,
    ONE_VS_ALL,
    PAIRWISE,
    Calibration,
    LeechModel,
    LeechNetwork,
)
from kennel.models.leech_nets import ChargingHead

SUPPORTED_FORMATS = (1, 3, 4)


def load_leech_model(path: str | os.PathLike, pair: str | None = None) -> LeechModel:
    """Read a leech bundle file or checkpoint directory and build its networks (eval, CPU).

    With ``pair``, a pairwise bundle is narrowed to that one binary network
    (``leech predict --bundle B --pair NAME``).
    """
    path = Path(path)
    if path.is_dir():
        model = _load_checkpoint(path)
    elif path.is_file():
        bundle = read_model_file(path)
        if isinstance(bundle, dict) and bundle.get("format") == "kennel-bundle":
            raise KennelError(f"{path}: a kennel bundle, not a leech model")
        if not looks_like_leech_bundle(bundle):
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
    # The kind and classes are read from the config's num_out, and the inputs are extracted as
    # the config reads (LeechInputSpec, as leech predict extracts them), each with a default
    # when unrecorded: 1 output, 1 signal channel, a one-hot sequence. A class whose own
    # default differs (ConvLSTMRemora's 2 outputs and signal_kmer, TransformerDwellResidual's
    # 2 channels, a residual TCN's pinned 2) would get inputs or give logits of another shape.
    built = {
        "num_out": module.num_out,
        "signal_in_channels": module.signal_in_channels,
        "seq_encoding": module.seq_encoding,
    }
    read = {
        "num_out": int(config.get("num_out") or 1),
        "signal_in_channels": int(config.get("signal_in_channels") or 1),
        "seq_encoding": config.get("seq_encoding") or "base_onehot",
    }
    for key in built:
        if built[key] != read[key]:
            raise KennelError(
                f"{where}: config records {key} {config.get(key)}, read as {read[key]}, but "
                f"{architecture} builds {built[key]} from it"
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
    checkpoint = read_model_file(checkpoint_path, allow_numpy=True)
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
    config["model_name"] = architecture  # the input spec reads it from the config
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
            # leech predict runs a one-output model of a multiclass bundle as a binary model
            # (MP/ML tags), as it runs a checkpoint's
            kind=MULTICLASS if config["num_out"] > 1 else BINARY,
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
    repeated = next((pair for i, pair in enumerate(pairs) if pair in pairs[:i]), None)
    if repeated is not None:
        # leech would run the one network twice and count its votes twice
        raise KennelError(f"{path}: leech bundle metadata lists pair {repeated!r} twice")
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
        state_dict = exported_state_dict(bytes(entry["exported_bytes"]), path, pair)
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
