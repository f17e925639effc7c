"""``kennel bundle-info`` for a leech model: what it is, what it was trained to, and which
inputs it reads, each setting the config does not record shown as leech predict's default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kennel.models.leech_defaults import (
    BUILT_AT_DEFAULTS_BY_LEECH,
    FEATURELESS_ARCHITECTURES,
    PACKAGED_KMER_TABLE,
    PACKAGED_KMER_TABLE_SHA256,
    SIGNAL_KMER_CONTEXT,
    SIGNAL_ONLY_ARCHITECTURES,
    WIDE_FEATURE_ARCHITECTURES,
    config_feature_channels,
    config_feature_window,
    recorded_feature_window,
    refines_signal_map,
)
from kennel.models.leech_model import BINARY, MULTICLASS, LeechModel


def _recorded(config: Mapping[str, Any], key: str, default: Any) -> str:
    """A config value, or leech predict's default and where another can be given."""
    if config.get(key) is not None:
        return repr(config[key]) if config[key] == "" else str(config[key])
    if default is None:
        return f"not recorded (trna.leech.{key} sets it)"
    return f"{default} (leech's default; not recorded: trna.leech.{key} sets it)"


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
    if model.architecture in BUILT_AT_DEFAULTS_BY_LEECH:
        lines.append(
            "  built from the config, as leech's trainer built it (leech predict 0.16.0 builds "
            "this class at its defaults: it loads only a bundle trained at them)"
        )
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
    channels = config_feature_channels(config)
    refined = refines_signal_map(config)
    recorded = recorded_feature_window(config)
    start, end = config_feature_window(config)
    width = shapes["features"][1]
    wide = model.architecture in WIDE_FEATURE_ARCHITECTURES
    if wide and recorded == (None, None):  # a config from before the window was recorded
        window = f"{width} bases (k-mer window widened by the dwell margin)"
    elif wide:
        window = f"bases {start:+d}..{end:+d}"
    elif end - start + 1 > width:
        window = f"the {width}-base k-mer window, cut from bases {start:+d}..{end:+d}"
    else:
        window = f"the {width}-base k-mer window"
    context = config.get("signal_kmer_context") or SIGNAL_KMER_CONTEXT
    encoding = config.get("seq_encoding") or "base_onehot"
    if encoding == "signal_kmer":
        encoding += f" (context {context[0]},{context[1]})"
    if config.get("mask_seq_side"):
        encoding += f", bases {config['mask_seq_side']} of the focus base blanked"
    unrecorded = (
        f"not recorded (leech's own {PACKAGED_KMER_TABLE}, {PACKAGED_KMER_TABLE_SHA256[:12]})"
    )
    signal = [f"signal_len {config.get('signal_len')}"]
    if bases := config.get("signal_context_bases"):
        signal.append(f"bases -{bases[0]}..+{bases[1]} of the focus base")
    norm = config.get("signal_norm", "median_mad")
    if norm == "pa_scaling":
        norm += f" (pa_mean {config.get('pa_mean')}, pa_stdev {config.get('pa_stdev')})"
    signal += [f"norm {norm}", f"reversed {config.get('reverse_signal', True)}"]
    if config.get("recover_softclip_signal"):
        signal.append("soft-clipped signal recovered")
    lines += [
        "inputs:",
        f"  signal: {shapes['signal']} ({', '.join(signal)})",
        f"  sequence: {shapes['sequence']} {encoding}"
        + (
            " (not read: the signal alone)"
            if model.architecture in SIGNAL_ONLY_ARCHITECTURES
            else ""
        ),
        *(
            ["  features: not read (no feature branch)"]
            if model.architecture in FEATURELESS_ARCHITECTURES
            else [
                f"  features: {shapes['features']}, {window} around the focus base "
                f"(dwell_offset {config.get('dwell_offset', 0)})",
                f"  feature channels: {', '.join(channels)}",
            ]
        ),
        f"motif: {_recorded(config, 'motif', None)} "
        f"offset {_recorded(config, 'motif_offset', 0)} "
        f"(anchor {_recorded(config, 'anchor', 'reference')}, base_justify "
        f"{_recorded(config, 'base_justify', 'center')}, require_query_mapping "
        f"{config.get('require_query_mapping', True)}, skip_motif_indels "
        f"{config.get('skip_motif_indels', False)})",
        f"signal-map refinement: {'on' if refined else 'off'} "
        f"(scale_iters {config.get('refine_scale_iters', 2)}, "
        f"half_bandwidth {config.get('refine_half_bandwidth', 5)}, "
        f"kmer_center_idx {config.get('refine_kmer_center_idx', -1)})",
        "k-mer table sha256: "
        + (
            config.get("kmer_table_sha256") or unrecorded
            if refined
            else "none read (no refinement)"
        ),
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
