"""Read a baskerville model from its files: ``params.json`` and a Keras 2 HDF5 ``model.h5``
(``SeqNN.save``'s full model, or ``save_weights``' weights only). No code from the files runs:
the HDF5 file is read as arrays with h5py, the params as JSON.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import h5py
import numpy as np
import torch

from kennel.errors import KennelError
from kennel.models.seqnn import SeqNN
from kennel.models.seqnn_layers import keras_layers

_LAYER_NAME = re.compile(r"^(?P<kind>.+?)(?:_(?P<number>\d+))?$")


def read_seqnn_params(path: str | os.PathLike) -> dict:
    """``params["model"]`` of a baskerville params file, checked to describe a SeqNN."""
    path = Path(path)
    try:
        params = json.loads(path.read_text())
    except FileNotFoundError:
        raise KennelError(f"{path}: params file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KennelError(f"{path}: not a baskerville params.json ({error})") from None
    model = params.get("model") if isinstance(params, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("trunk"), list):
        raise KennelError(f"{path}: not a baskerville params.json (no 'model' with a 'trunk')")
    return model


def seqnn_layout(params_path: str | os.PathLike, seq_len: int | None = None) -> SeqNN:
    """The network the params describe, without weights (on the meta device: no memory, so a
    full Borzoi's shapes cost nothing to learn)."""
    model_params = read_seqnn_params(params_path)
    if seq_len:
        model_params = {**model_params, "seq_length": int(seq_len)}
    with torch.device("meta"):
        return SeqNN(model_params, where=str(params_path))


def load_seqnn(
    params_path: str | os.PathLike, weights_path: str | os.PathLike, seq_len: int | None = None
) -> SeqNN:
    """The model of ``params_path`` with the weights of ``weights_path``, in eval mode."""
    weights_path = Path(weights_path)
    model = seqnn_layout(params_path, seq_len).to_empty(device="cpu")
    groups = _keras_layers(weights_path)
    wanted = defaultdict(list)
    for layer in keras_layers(model):
        wanted[layer.keras_class].append(layer)
    for kind in sorted(set(groups) | set(wanted)):
        have, need = groups.get(kind, []), wanted.get(kind, [])
        if len(have) != len(need):
            raise KennelError(
                f"{weights_path}: holds {len(have)} {kind} layers, {params_path}'s model has "
                f"{len(need)} (are these the params the model was trained with?)"
            )
        for (name, weights), layer in zip(have, need, strict=True):
            try:
                layer.load(weights)
            except KennelError as error:
                raise KennelError(f"{weights_path}: layer {name}: {error}") from None
    return model.eval()


def _keras_layers(path: Path) -> dict[str, list[tuple[str, dict[str, np.ndarray]]]]:
    """Each weighted layer's arrays, grouped by Keras class and in creation order."""
    try:
        with h5py.File(path, "r") as handle:
            root = handle.get("model_weights", handle)  # save() nests, save_weights() not
            if "layer_names" not in root.attrs:
                raise KennelError(f"{path}: not a Keras 2 HDF5 model (no layer_names)")
            groups = defaultdict(list)
            for name in map(_text, root.attrs["layer_names"]):
                names = [_text(weight) for weight in root[name].attrs.get("weight_names", [])]
                if not names:
                    continue
                match = _LAYER_NAME.match(name)
                weights = {_short(weight): np.asarray(root[name][weight]) for weight in names}
                groups[match["kind"]].append((int(match["number"] or 0), name, weights))
    except FileNotFoundError:
        raise KennelError(f"{path}: model file not found") from None
    except OSError as error:
        raise KennelError(f"{path}: not an HDF5 file ({str(error).splitlines()[0]})") from None
    if "sync_batch_normalization" in groups:  # older Keras's class for batch-sync norms
        if "batch_normalization" in groups:
            raise KennelError(
                f"{path}: mixes batch_normalization and sync_batch_normalization layers, whose "
                "order kennel cannot tell apart"
            )
        groups["batch_normalization"] = groups.pop("sync_batch_normalization")
    return {
        kind: [(name, weights) for _, name, weights in sorted(layers, key=lambda t: t[0])]
        for kind, layers in groups.items()
    }


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _short(weight_name: str) -> str:
    """``multihead_attention_3/q_layer/kernel:0`` → ``q_layer/kernel``."""
    return weight_name.split("/", 1)[-1].removesuffix(":0")
