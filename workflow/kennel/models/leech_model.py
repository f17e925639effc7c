"""A leech model as kennel holds it: its networks, calibration and leech predict's scoring.

:func:`kennel.models.leech.load_leech_model` builds one from a bundle or checkpoint directory;
:class:`LeechScorer` is the one module the device runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kennel.errors import KennelError
from kennel.models.leech_arch import feature_width
from kennel.models.leech_defaults import SIGNAL_KMER_CONTEXT

MULTICLASS, BINARY, PAIRWISE, ONE_VS_ALL = "multiclass", "binary", "pairwise", "one_vs_all"

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

    def apply(
        self, logits: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """Calibrated ``logits``; ``weight`` and ``bias`` are this calibration's as the module
        running it holds them (buffers, on the logits' device: a CPU tensor in a compiled CUDA
        forward would cost a copy a batch and keep inductor from CUDA graphs)."""
        if self.method == "temperature":
            return logits / self.temperature
        weight, bias = weight.to(logits.dtype), bias.to(logits.dtype)
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
            left, right = (int(c) for c in config.get("signal_kmer_context") or SIGNAL_KMER_CONTEXT)
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
        calibrated = self.calibration is not None and self.calibration.weight is not None
        # a matrix or dirichlet calibration's parameters move with the module, like Platt's
        # (copies: the model's own stay as loaded, whatever is done to this module)
        for name in ("weight", "bias"):
            value = getattr(self.calibration, name) if calibrated else None
            self.register_buffer(f"calibration_{name}", None if value is None else value.clone())
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
                logits = self.calibration.apply(
                    logits, self.calibration_weight, self.calibration_bias
                )
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
