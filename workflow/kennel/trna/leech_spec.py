"""What a leech 0.16.0 bundle's model takes: its input spec.

:class:`LeechInputSpec` reads a model config (:mod:`kennel.trna.leech_config`) and refuses what
kennel does not reproduce; the chunks a spec shapes are :mod:`kennel.trna.leech_chunks`, leech's
base codes and k-mer level table :mod:`kennel.trna.leech_levels`. Nothing here needs escapepod or
pysam, so the classify job imports it alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kennel.errors import KennelError
from kennel.models.leech_defaults import (
    DEFAULT_FEATURE_CHANNELS,
    FEATURE_CHANNELS,
    FEATURELESS_ARCHITECTURES,
    PACKAGED_KMER_TABLE,
    PACKAGED_KMER_TABLE_SHA256,
    SIGNAL_KMER_CONTEXT,
    SUPPORTED_ARCHITECTURES,
    WIDE_FEATURE_ARCHITECTURES,
    config_feature_channels,
    config_feature_window,
    refines_signal_map,
)
from kennel.trna.leech_config import checked_dwell_template, dwell_template
from kennel.trna.spec_json import JsonSpec

SEQ_ENCODINGS = ("signal_kmer", "base_onehot")
ANCHORS = ("reference", "basecall")
SIGNAL_NORMS = ("median_mad", "zscore", "quantile", "pa_scaling")
JUSTIFICATIONS = ("start", "center", "end")


# --- the spec -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeechInputSpec(JsonSpec):
    """What a leech 0.16.0 model config says about its inputs, checked to be what kennel does.

    Build it with :meth:`from_config`; it refuses, naming the config key, any setting this
    reimplementation does not reproduce, so that a model never silently gets inputs it was not
    trained on.
    """

    signal_len: int
    # samples before/after the focus sample; None when the window is base-defined
    signal_context: tuple[int, int] | None
    signal_channels: int  # 1: signal; 2: signal and k-mer residual
    seq_encoding: str
    kmer_len: int  # the model's base window (base_onehot bases; a narrow model's feature width)
    feature_start: int  # first feature column, relative to the focus base
    feature_end: int  # last feature column (inclusive)
    feature_channels: tuple[str, ...]
    motif: str
    motif_offset: int
    base_justify: str
    require_query_mapping: bool
    refine_half_bandwidth: int
    refine_scale_iters: int  # < 0: escapepod is not run (the move-table map is kept)
    refine_kmer_centre: int  # -1: the table's k // 2
    # the table the inputs need (leech's packaged one where the config records none; None
    # without refinement, which reads none)
    kmer_table_sha256: str | None
    # "left" (5') or "right" (3'): the sequence bases on that side of the focus base are blanked
    # (leech#256: so a model cannot read the tRNA body from the acceptor stem beside a 3' motif)
    mask_seq_side: str | None = None
    # bases before/after the focus base whose samples make the signal window (leech's
    # --signal-context-bases): the same bases whatever the read's speed, in signal_len samples
    signal_context_bases: tuple[int, int] | None = None
    # a motif hit with any indel in the motif is dropped (leech's --skip-motif-indels), not only
    # one whose mapped length is off by more than 3
    skip_motif_indels: bool = False
    # a sample window running past the alignment reads the soft-clipped signal there, not zeros
    # (leech's --recover-softclip-signal; a base-defined window never runs past it)
    recover_softclip_signal: bool = False
    signal_norm: str = "median_mad"  # how the raw signal is normalised (SIGNAL_NORMS)
    pa_mean: float | None = None  # pa_scaling's shift and scale, after calibration to picoamps
    pa_stdev: float | None = None
    # leech's per-amino-acid dwell templates (model train --dwell-template-table, leech#369): the
    # table's text; each amino acid adds a feature row, the dwell over the template's
    dwell_template: str | None = None
    # "reference": chunks from the aligned reference slice and its signal; "basecall": from the
    # read's SEQ and the whole read's signal, the motif found in the reference and mapped to it
    anchor: str = "reference"
    # False: the move-table map as it is, and no k-mer table (leech's --no-refine-signal-map)
    refine_signal_map: bool = True
    # how the leech run to reproduce extracted (not the model's: leech predict's --backend, and
    # whether leech-core was installed); each changes the features' last bits
    backend: str = "auto"
    leech_core: bool = True

    @property
    def feature_rows(self) -> int:
        """Rows of a chunk's features: the channels, then one per template amino acid."""
        extra = 0 if self.dwell_template is None else dwell_template(self.dwell_template).rows
        return len(self.feature_channels) + extra

    @property
    def leech_python_path(self) -> bool:
        """Whether leech predict cuts this model's chunks on its Python extraction path (its
        Rust one lacks these options, is told not to use it or is not installed), whose
        features differ from the Rust one's in the last bits
        (:func:`kennel.trna.leech_signal.process_read`)."""
        return (
            self.backend == "python"
            or not self.leech_core
            or self.signal_norm != "median_mad"
            or self.recover_softclip_signal
            or self.mask_seq_side is not None
        )

    @property
    def feature_width(self) -> int:
        return self.feature_end - self.feature_start + 1

    @property
    def sequence_shape(self) -> tuple[int, int]:
        """Shape of one chunk's expanded sequence input."""
        if self.seq_encoding == "signal_kmer":
            return (4 * sum(SIGNAL_KMER_CONTEXT) + 4, self.signal_len)
        return (4, 2 * (self.kmer_len // 2) + 1)

    @classmethod
    def from_config(
        cls,
        config: Mapping,
        kmer_table_sha256: str | None = None,
        dwell_template_text: str | None = None,
    ) -> LeechInputSpec:
        """The spec of a leech model config (a bundle's ``config`` or a checkpoint's JSON).

        ``kmer_table_sha256``, when given, is the SHA-256 of the k-mer table that will be used;
        a config recording another table is refused. ``dwell_template_text`` is the dwell
        template table a config naming one needs (:func:`load_dwell_template`). Defaults for
        absent keys are leech's own.
        """

        def refuse(key: str, why: str) -> KennelError:
            return KennelError(f"leech config key {key!r}: {why}")

        def check(key: str, default, allowed: Iterable, why: str, resolved: bool = False):
            # leech predict resolves some keys against its own options: null takes the default
            value = config.get(key, default)
            if resolved and value is None:
                value = default
            if value not in tuple(allowed):
                raise refuse(key, f"{value!r} is not supported ({why})")
            return value

        if config.get("is_remora"):
            raise refuse("is_remora", "Remora models are not supported")
        anchor = check("anchor", "reference", ANCHORS, "reference or basecall", True)
        if anchor == "basecall" and not config.get("require_query_mapping", True):
            # the chunk's focus is the motif's query position, which needs the mapping
            raise refuse("require_query_mapping", "False needs anchor 'reference'")
        signal_norm = check(
            "signal_norm", "median_mad", SIGNAL_NORMS, f"only {', '.join(SIGNAL_NORMS)}"
        )
        pa_mean, pa_stdev = config.get("pa_mean"), config.get("pa_stdev")
        if signal_norm == "pa_scaling":
            # leech fails every read without them
            for key, value in (("pa_mean", pa_mean), ("pa_stdev", pa_stdev)):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise refuse(key, f"{value!r}: pa_scaling needs the basecaller's {key}")
            if pa_stdev == 0:
                raise refuse("pa_stdev", "0: pa_scaling divides by it")
            pa_mean, pa_stdev = float(pa_mean), float(pa_stdev)
        else:
            pa_mean = pa_stdev = None
        # leech predict reverses by its own --no-reverse-signal flag, not by this key, so a model
        # trained on unreversed signal would be fed reversed signal by leech predict itself
        check("reverse_signal", True, (True,), "only reversed (5'->3') RNA signal")
        recover = check("recover_softclip_signal", False, (False, True), "true or false")
        mask_seq_side = check(
            "mask_seq_side", None, (None, "left", "right"), "left or right of the focus base"
        )
        skip_motif_indels = check("skip_motif_indels", False, (False, True), "true or false")

        signal_channels = int(config.get("signal_in_channels", 1))
        if signal_channels not in (1, 2):
            raise refuse("signal_in_channels", f"{signal_channels} is not 1 or 2")
        refine = refines_signal_map(config)

        signal_len = int(config.get("signal_len", 100))
        left, right = config.get("left_context"), config.get("right_context")
        if left is not None and right is not None:
            signal_context = (int(left), int(right))
        else:
            signal_context = (signal_len // 2, signal_len // 2)
        context_bases = config.get("signal_context_bases")
        if context_bases is not None:
            # leech predict cuts the window at the bases and ignores the sample context
            if (
                not isinstance(context_bases, (list, tuple))
                or len(context_bases) != 2
                or not all(isinstance(x, int) and x >= 0 for x in context_bases)
            ):
                raise refuse(
                    "signal_context_bases",
                    f"{context_bases!r} is not two non-negative base counts",
                )
            if signal_len <= 0:
                raise refuse("signal_len", f"{signal_len} is not positive")
            context_bases, signal_context = tuple(context_bases), None
        elif signal_len <= 0 or min(signal_context) < 0 or sum(signal_context) != signal_len:
            raise refuse(
                "left_context",
                f"signal context {signal_context} must be non-negative and add up to "
                f"signal_len={signal_len}",
            )

        seq_encoding = check(
            "seq_encoding", "base_onehot", SEQ_ENCODINGS, f"only {', '.join(SEQ_ENCODINGS)}"
        )
        if seq_encoding == "signal_kmer":
            context = tuple(int(x) for x in config.get("signal_kmer_context", SIGNAL_KMER_CONTEXT))
            if context != SIGNAL_KMER_CONTEXT:
                raise refuse(
                    "signal_kmer_context", f"{list(context)} is not supported (only [4, 4])"
                )

        kmer_len = int(config.get("kmer_len", 9))
        half = kmer_len // 2
        feature_start, feature_end = config_feature_window(config)
        width = feature_end - feature_start + 1
        if width <= 0:
            raise refuse("feature_end", f"feature window {feature_start}..{feature_end} is empty")
        architecture = config.get("model_name")
        if architecture is not None and architecture not in SUPPORTED_ARCHITECTURES:
            raise refuse(
                "model_name",
                f"leech architecture {architecture!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})",
            )
        # a model without a feature branch is fed no features: leech predict never cuts their
        # window, so it refuses none of the windows below (kennel still stores the rows)
        reads_features = architecture not in FEATURELESS_ARCHITECTURES
        if width > kmer_len and architecture not in WIDE_FEATURE_ARCHITECTURES:
            if architecture is None:
                raise refuse(
                    "model_name",
                    f"not recorded, so whether the model reads its {width}-base feature "
                    "window whole or cut to kmer_len is unknown",
                )
            # leech predict cuts it to the kmer_len bases the network takes: features
            # computed over that window alone are the same values
            start = -half + int(config.get("dwell_offset", 0))
            fits = feature_start <= start and start + kmer_len - 1 <= feature_end
            if reads_features and not fits:
                raise refuse(
                    "dwell_offset",
                    f"the {kmer_len}-base window from {start:+d} does not fit the feature "
                    f"window {feature_start}..{feature_end} (leech predict refuses it too)",
                )
            feature_start, feature_end = start, start + kmer_len - 1
        elif width < kmer_len and architecture not in WIDE_FEATURE_ARCHITECTURES and reads_features:
            raise refuse(
                "feature_end",
                f"feature window {feature_start}..{feature_end} is narrower than the "
                f"kmer_len={kmer_len} positions the network takes (leech predict fails too)",
            )

        listed = config.get("feature_channels") or DEFAULT_FEATURE_CHANNELS
        unknown = [name for name in listed if name not in FEATURE_CHANNELS]
        if unknown:
            raise refuse("feature_channels", f"unknown channel {unknown[0]!r}")
        channels = config_feature_channels(config)
        template = None
        if reads_features:
            template = checked_dwell_template(config, dwell_template_text, channels)
        rows = len(channels) + (template.rows if template else 0)
        num_features = config.get("num_features")
        if reads_features and num_features is not None and int(num_features) != rows:
            raise refuse(
                "num_features",
                f"{num_features} != the {len(channels)} feature_channels"
                + (f" and {template.rows} dwell template rows" if template else ""),
            )

        motif = config.get("motif")
        if motif is None:
            raise refuse(
                "motif",
                "None: not recorded; give the motif the model was trained on as "
                "trna.leech.motif (leech predict --motif)",
            )
        if not motif or not isinstance(motif, str):
            # leech predict would score every position of every read
            raise refuse("motif", f"{motif!r} is not supported (a motif is required)")
        motif_offset = int(config.get("motif_offset") or 0)  # null: leech's default
        base_justify = check(
            "base_justify", "center", JUSTIFICATIONS, "start, center or end", resolved=True
        )

        centre = int(config.get("refine_kmer_center_idx", -1))
        if centre < -1:
            raise refuse("refine_kmer_center_idx", f"{centre} is negative")
        sha = config.get("kmer_table_sha256")
        if sha is None:
            # the model predates the key: leech predict refines with its packaged table
            sha = PACKAGED_KMER_TABLE_SHA256
            trained = f"records no table; leech predict uses its own {PACKAGED_KMER_TABLE}"
        else:
            trained = "the model was trained against table"
        if not refine:
            sha = None  # no table is read
        elif kmer_table_sha256 is not None and sha != kmer_table_sha256:
            raise refuse(
                "kmer_table_sha256",
                f"{trained} {sha[:12]}…, the table given is {kmer_table_sha256[:12]}…",
            )

        return cls(
            signal_len=signal_len,
            signal_context=signal_context,
            signal_channels=signal_channels,
            seq_encoding=seq_encoding,
            kmer_len=kmer_len,
            feature_start=feature_start,
            feature_end=feature_end,
            feature_channels=channels,
            motif=motif.upper(),
            motif_offset=motif_offset,
            base_justify=base_justify,
            require_query_mapping=bool(config.get("require_query_mapping", True)),
            refine_half_bandwidth=int(config.get("refine_half_bandwidth", 5)),
            refine_scale_iters=int(config.get("refine_scale_iters", 2)),
            refine_kmer_centre=centre,
            kmer_table_sha256=sha,
            mask_seq_side=mask_seq_side,
            signal_context_bases=context_bases,
            skip_motif_indels=skip_motif_indels,
            recover_softclip_signal=recover,
            signal_norm=signal_norm,
            pa_mean=pa_mean,
            pa_stdev=pa_stdev,
            dwell_template=dwell_template_text if template is not None else None,
            anchor=anchor,
            refine_signal_map=refine,
        )
