"""baskerville's ``SeqNN.build_model`` followed over a model's params: each block's options
read once (globals, then its own; anything left over that would change the computation is
refused by name), shapes and saved representations tracked, and the blocks of
:mod:`kennel.models.seqnn_blocks` made in baskerville's layer order, which is what pairs each
layer with its Keras weights (:mod:`kennel.models.seqnn`)."""

from __future__ import annotations

import re

import numpy as np
from torch import nn

from kennel.errors import KennelError
from kennel.models.seqnn_blocks import (
    Block,
    Crop,
    Pooled,
    ResTower,
    Transformer,
    TransformerTower,
    UNet,
)
from kennel.models.seqnn_layers import (
    Conv,
    PositionwiseDense,
    Scale,
    SeparableConv,
    activation_layer,
    norm_layer,
    rounded,
)

# SeqNN.build_block hands these model-level options to every lower-case block
GLOBAL_OPTIONS = (
    "activation",
    "bn_momentum",
    "norm_type",
    "l2_scale",
    "l1_scale",
    "padding",
    "kernel_initializer",
)
# options that shape training only: at inference they change nothing
TRAINING_ONLY = frozenset(
    (
        "bn_momentum",
        "l2_scale",
        "l1_scale",
        "kernel_initializer",
        "dropout",
        "dropout_residual",
        "mha_l2_scale",
        "mha_initializer",
        "attention_dropout",
        "position_dropout",
        "norm_gamma",
    )
)


class _Options:
    """One block's options (globals, then its own), each read once; leftovers are refused."""

    def __init__(self, given: dict, where: str):
        self.given, self.where, self.read = dict(given), where, set()

    def get(self, key: str, default=None):
        self.read.add(key)
        return self.given.get(key, default)

    def number(self, key: str, default=None, kind=int):
        """A numeric option; a required one (no default) must be there."""
        value = self.get(key, default)
        try:
            return kind(value)
        except (TypeError, ValueError):
            given = "missing" if value is None else f"{value!r} is not a number"
            raise KennelError(f"{self.where}: option {key!r}: {given}") from None

    def only(self, key: str, default, allowed: tuple):
        value = self.get(key, default)
        if value not in allowed:
            raise KennelError(
                f"{self.where}: {key}={value!r} is not supported (kennel reads "
                f"{', '.join(repr(a) for a in allowed)})"
            )
        return value

    def done(self) -> None:
        for key in sorted(set(self.given) - self.read - TRAINING_ONLY):
            raise KennelError(f"{self.where}: option {key!r} is not supported by kennel")


class _Shape:
    """What flows between blocks: channels, positions, and bases per position."""

    def __init__(self, channels: int, length: int, scale: int = 1):
        self.channels, self.length, self.scale = channels, length, scale


class Builder:
    """Follows SeqNN.build_model over the params, tracking shapes and saved representations."""

    def __init__(self, model_params: dict, where: str):
        self.params, self.where = model_params, where
        if "trunk" not in model_params or "seq_length" not in model_params:
            raise KennelError(f"{where}: 'model' needs 'seq_length' and 'trunk' (baskerville)")
        if model_params.get("adapter"):  # baskerville inserts transfer-learning layers then
            raise KennelError(f"{where}: models with an 'adapter' are not supported by kennel")
        self.seq_len = _Options(model_params, where).number("seq_length")
        if self.seq_len <= 0:
            raise KennelError(f"{where}: seq_length {self.seq_len} is not positive")
        self.globals = {k: model_params[k] for k in GLOBAL_OPTIONS if model_params.get(k)}
        self.shape = _Shape(4, self.seq_len)
        self.max_scale = 1
        self.saved: list[tuple[int, int]] = []  # (length, channels) of each representation
        self.wanted: set[int] = set()

    def trunk(self) -> list[nn.Module]:
        blocks = []
        for number, block in enumerate(self.params["trunk"], 1):
            blocks.append(self._block(block, f"{self.where}: trunk block {number}"))
            self._save()
        activation = self.params.get("activation")
        blocks.append(Block(activation_layer(activation if activation else None)))
        return blocks

    def head(self) -> list[nn.Module]:
        heads = sorted((k for k in self.params if k.startswith("head")), key=_natural)
        if not heads:
            raise KennelError(f"{self.where}: the model has no head")
        head = self.params[heads[0]]  # hound_snp restores head 0
        blocks = head if isinstance(head, list) else [head]
        where = f"{self.where}: {heads[0]}"
        if not blocks:
            raise KennelError(f"{where}: the head has no blocks")
        return [self._block(block, f"{where} block {n}") for n, block in enumerate(blocks, 1)]

    def _block(self, block: dict, where: str) -> nn.Module:
        if not isinstance(block, dict) or "name" not in block:
            raise KennelError(f"{where}: a block is a mapping with a 'name', not {block!r}")
        name = block["name"]
        where = f"{where} ({name})"
        own = {k: v for k, v in block.items() if k != "name"}
        if name == "Cropping1D":  # a Keras layer: takes no global options
            build, options = Builder._cropping, _Options(own, where)
        elif name in BLOCKS:
            build, options = BLOCKS[name], _Options({**self.globals, **own}, where)
        else:
            raise KennelError(
                f"{where}: block {name!r} is not supported by kennel "
                f"(it reads {', '.join(sorted(BLOCKS))}, Cropping1D)"
            )
        try:
            module = build(self, options)
        except KennelError as error:  # a layer's own complaint: say which block
            if str(error).startswith(where):
                raise
            raise KennelError(f"{where}: {error}") from None
        except (TypeError, ValueError, ZeroDivisionError, RuntimeError) as error:
            # a value of the wrong kind that the checks above let through
            raise KennelError(f"{where}: invalid options ({error})") from None
        options.done()
        return module

    def _save(self) -> None:
        self.saved.append((self.shape.length, self.shape.channels))

    # --- block builders: each follows the baskerville function of the same name

    def _pool(self, options: _Options) -> int:
        size = options.number("pool_size", 1)
        options.only("pool_type", "max", ("max",))
        options.only("padding", "same", ("same",))
        if size > 1:
            if self.shape.length % size:  # Keras would pad; the U-net could not match it up
                raise KennelError(
                    f"{options.where}: seq_len {self.seq_len} leaves {self.shape.length} "
                    f"positions to pool by {size}: it must be a multiple of the product of "
                    "the trunk's pools (128 for Borzoi)"
                )
            self.shape.length //= size
            self.shape.scale *= size
            self.max_scale = max(self.max_scale, self.shape.scale)
        return size

    def conv_dna(self, options: _Options) -> nn.Module:
        channels = self.shape.channels
        filters = options.get("filters") or channels
        options.only("residual", False, (False,))
        options.only("se", False, (False,))
        options.only("conv_type", "standard", ("standard",))
        options.only("stride", 1, (1,))
        norm_type = options.get("norm_type")
        use_bias = options.get("use_bias")
        use_bias = norm_type is None if use_bias is None else use_bias
        layers = [
            Conv(channels, filters, options.number("kernel_size", 15), use_bias),
            norm_layer(norm_type, filters),
            activation_layer(options.get("activation", "relu")),
        ]
        self.shape.channels = filters
        return Block(Pooled(layers, self._pool(options)))

    def conv_nac(self, options: _Options) -> nn.Module:
        return Block(self._conv_nac(options))

    def _conv_nac(self, options: _Options, filters: int | None = None, width=None) -> nn.Module:
        channels = self.shape.channels
        filters = filters or options.get("filters") or channels
        width = width or options.number("kernel_size", 1)
        options.only("stride", 1, (1,))
        options.only("se", False, (False,))
        conv_type = options.only("conv_type", "standard", ("standard", "separable"))
        residual = bool(options.get("residual", False))
        dilation = options.number("dilation_rate", 1)
        conv = (
            SeparableConv(channels, filters, width, True, dilation)
            if conv_type == "separable"
            else Conv(channels, filters, width, True, dilation)
        )
        layers = [
            norm_layer(options.get("norm_type"), channels),
            activation_layer(options.get("activation", "relu")),
            conv,
        ]
        self.shape.channels = filters
        return Pooled(layers, self._pool(options), residual)

    def conv_block(self, options: _Options) -> nn.Module:
        channels = self.shape.channels
        filters = options.get("filters") or channels
        options.only("stride", 1, (1,))
        conv_type = options.only("conv_type", "standard", ("standard", "separable"))
        norm_type = options.get("norm_type")
        width, dilation = options.number("kernel_size", 1), options.number("dilation_rate", 1)
        bias = norm_type is None  # a batch norm's shift replaces it
        conv = (
            SeparableConv(channels, filters, width, bias, dilation)
            if conv_type == "separable"
            else Conv(channels, filters, width, bias, dilation)
        )
        layers = [
            activation_layer(options.get("activation", "relu")),
            conv,
            norm_layer(norm_type, filters),
        ]
        residual = bool(options.get("residual", False))
        end = options.get("activation_end")
        self.shape.channels = filters
        pooled = Pooled(layers, 1, residual)
        return Block(nn.Sequential(pooled, activation_layer(end), Pooled([], self._pool(options))))

    def res_tower(self, options: _Options) -> nn.Module:
        start = options.number("filters_init", kind=float)
        multiplier = options.get("filters_mult")
        repeat = options.number("repeat", 1)
        divisible_by = options.number("divisible_by", 1)
        convs = options.number("num_convs", 2)
        width = options.number("kernel_size", 1)
        pool = options.number("pool_size", 2)
        options.only("pool_type", "max", ("max",))
        if multiplier is None:  # baskerville derives it from filters_end
            end = options.number("filters_end", kind=float)
            multiplier = np.exp(np.log(end / start) / (repeat - 1)) if repeat > 1 else 1.0
        else:
            multiplier = options.number("filters_mult", kind=float)
        conv_options = {k: v for k, v in options.given.items() if k not in RES_TOWER_OWN}
        repeats, filters = [], start
        for _ in range(repeat):
            inner = _Options({**conv_options, "kernel_size": width}, options.where)
            first = self._conv_nac(inner, rounded(filters, divisible_by))
            rest = None
            if convs > 1:
                later = [
                    self._conv_nac(
                        _Options(conv_options, options.where), rounded(filters, divisible_by), 1
                    )
                    for _ in range(1, convs)
                ]
                rest = nn.Sequential(*later, Scale(self.shape.channels))
            repeats.append((first, rest))
            self._save()
            inner.done()
            self._pool(_Options({"pool_size": pool}, options.where))
            filters *= multiplier
        options.read |= set(options.given)  # the rest went to each conv_nac, checked there
        return ResTower(repeats, pool)

    def transformer_tower(self, options: _Options) -> nn.Module:
        repeat = options.number("repeat", 2)
        options.only("block_type", "transformer", ("transformer",))
        layers = [self._transformer(options) for _ in range(repeat)]
        return TransformerTower(nn.Sequential(*layers))

    def transformer(self, options: _Options) -> nn.Module:
        return TransformerTower(self._transformer(options))

    def _transformer(self, options: _Options) -> nn.Module:
        channels, heads = self.shape.channels, options.number("heads", 1)
        options.only("out_size", None, (None,))
        options.only("qkv_width", 1, (1,))
        for unused in ("activation", "norm_type", "padding"):
            options.get(unused)  # globals baskerville's transformer swallows (its dense uses relu)
        features = options.get("num_position_features")
        if features is None:  # MultiheadAttention's default: value size, even
            features = (channels // heads // 2) * 2
        return Transformer(
            channels,
            heads,
            options.number("key_size"),
            int(features),
            bool(options.get("content_position_bias", True)),
            None if options.get("seqlen_train") is None else options.number("seqlen_train"),
            options.number("dense_expansion", 2.0, float),
        )

    def unet_conv(self, options: _Options) -> nn.Module:
        channels, length = self.shape.channels, self.shape.length
        index = next(
            (i for i in reversed(range(len(self.saved) - 1)) if self.saved[i][0] == 2 * length),
            None,
        )
        if index is None:
            raise KennelError(f"{options.where}: no earlier representation of length {2 * length}")
        self.wanted.add(index)
        skip_channels = self.saved[index][1]
        norm_type, activation = options.get("norm_type"), options.get("activation", "relu")
        current = nn.Sequential(norm_layer(norm_type, channels), activation_layer(activation))
        skip = nn.Sequential(norm_layer(norm_type, skip_channels), activation_layer(activation))
        current_dense = (
            PositionwiseDense(channels, channels)
            if options.get("upsample_conv", False)
            else nn.Identity()
        )
        skip_dense = PositionwiseDense(skip_channels, channels)
        conv = SeparableConv(channels, channels, options.number("kernel_size", 1))
        factor = options.only("stride", 2, (2,))  # baskerville looks for twice the length
        self.shape.length *= factor
        self.shape.scale //= factor
        return UNet(current, skip, current_dense, skip_dense, conv, factor, index)

    def _cropping(self, options: _Options) -> nn.Module:
        cropping = options.get("cropping", 1)
        start, end = (cropping, cropping) if isinstance(cropping, int) else cropping
        if not (isinstance(start, int) and isinstance(end, int) and min(start, end) >= 0):
            raise KennelError(f"{options.where}: cropping {cropping!r} is not 1 or 2 counts")
        if start + end >= self.shape.length:
            raise KennelError(f"{options.where}: cropping {cropping!r} leaves no positions")
        self.shape.length -= start + end
        return Crop(int(start), int(end))

    def final(self, options: _Options) -> nn.Module:
        options.only("flatten", False, (False,))
        for unused in ("norm_type", "padding"):
            options.get(unused)  # globals baskerville's final swallows
        units = options.number("units")
        dense = PositionwiseDense(self.shape.channels, units)
        self.shape.channels = units
        # Keras's Dense applies it: its gelu is the exact one, not baskerville's tanh form
        activation = activation_layer(options.get("activation", "linear"), exact_gelu=True)
        return Block(nn.Sequential(dense, activation))


RES_TOWER_OWN = frozenset(
    (
        "filters_init",
        "filters_end",
        "filters_mult",
        "kernel_size",
        "dropout",
        "pool_size",
        "pool_type",
        "divisible_by",
        "repeat",
        "num_convs",
    )
)
BLOCKS = {
    name: getattr(Builder, name)
    for name in (
        "conv_dna",
        "conv_block",
        "conv_nac",
        "res_tower",
        "transformer_tower",
        "transformer",
        "unet_conv",
        "final",
    )
}


def _natural(key: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]
