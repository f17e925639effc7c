#!/usr/bin/env bash
# Remakes this folder: bundles leech 0.16.0 trains on the shared fixture reads with a feature
# window of bases -7..+7 (leech data prepare --feature-start -7 --feature-end 7; the configs
# record kmer_len 11, feature_start -7, feature_end 7), and leech predict's tags with each:
# fx_tcndwell_wide.pt, a TCNDwell of leech's default size (../shared/leech/README.md's recipe
# otherwise), and fx_<architecture>.pt for the other architectures kennel implements, small
# (TCN: 16 channels, 3 layers; ConvLSTM: conv channels 4/16/32, LSTM 16; transformer: width 32,
# one layer; ResNet: base width 16; ConvOnly: base width 4, 2 blocks; Remora: width 16; 2 epochs:
# the tags, not the accuracy, are the point), fx_mask_*.pt, small TCNDwells trained on masked
# sequences, with the sequence inputs leech predict gave them (masked_inputs.npz),
# fx_context_bases.pt, one on a base-defined signal window (context_bases_inputs.npz),
# fx_dwell_template.pt, one with dwell template rows (dwell_template_inputs.npz), the
# fixture reads edited for skip_motif_indels and recover_softclip_signal (make_motif_indels.py,
# make_softclips.py), and leech predict's tags with other signal normalisations
# (make_signal_norms.py), fx_basecall.pt, one trained on basecall-anchored chunks
# (make_basecall.py, basecall_inputs.npz), fx_unrefined.pt, one trained without signal-map
# refinement (make_unrefined.py, unrefined_inputs.npz), fx.legacy_*.bam, the wide-window
# TCNDwell's tags with its window in legacy keys (make_legacy_windows.py), the fixture TCNDwell's
# with leech's Python extraction, forced or without leech-core (make_backends.py),
# fx.tcndwell.*.tsv, leech predict's TSV output (make_tsv.py),
# fx_ConvLSTMRemoraBase.pt and fx_SignalCNN.pt, which leech predict loads only when trained at the class defaults
# (make_config_built.py), leech_logits.npz, leech's own logits for each attention variant,
# experimental TCN and hand-written network on a few chunks, and overrides.pt
# (make_overrides.py). leech
# predict's default Rust backend refuses its own ConvLSTMBase* bundles (num_features 1 against
# the 12 features it extracts), so those are predicted with --backend python. Training is
# seeded: a rerun writes the same tags and logits (the bundles' zip timestamps differ). Needs
# leech in a Python 3.12
# environment (not in CI):
#   python3.12 -m venv /opt/leech-venv
#   /opt/leech-venv/bin/pip install leech==0.16.0 leech-core==0.16.0
# Usage: bash tests/leech/leech_made/make.sh [path to ../shared/leech]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shared="$(cd "${1:-$here/../../../../shared/leech}" && pwd)"
export PATH="/opt/leech-venv/bin:$PATH"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
cp "$shared/data/reference.fa" ref.fa
python "$shared/scripts/split_by_class.py" "$shared/data/fx.bam" "$shared/data/fx.truth.tsv" split
for class in Ala Gly Leu Phe; do
  leech data prepare --pod5 "$shared/data/fx.pod5" --bam "split/class_$class.bam" \
    --reference-fasta ref.fa -o "prep_$class" --motif CCAGGC --motif-offset 2 \
    --label "$class" --no-split --workers 2 --seed 1 --feature-start -7 --feature-end 7
done
leech data merge -i Ala=prep_Ala/all.npz -i Gly=prep_Gly/all.npz -i Leu=prep_Leu/all.npz \
  -i Phe=prep_Phe/all.npz -o merged --seed 1
leech model train --train-data merged/train.npz --val-data merged/val.npz --model TCNDwell \
  --output-dir model --epochs 5 --batch-size 16 --device cpu --seed 1 --num-out 4 \
  --loss cross_entropy --motif CCAGGC --motif-offset 2
echo '{"hidden_channels": 16, "num_layers": 3}' > small.json
experimental="TCNDwellSplitResidual TCNDwellSplitResidualLN TCNDwellResidualMotor
  TCNDwellResidualLNMotor TCNDwellResidualDwellAttn TCNDwellResidualLNDwellAttn"
for architecture in TCNDwellGN TCNDwellLN TCNDwellResidual TCNDwellResidualGN TCNDwellResidualLN \
  $experimental; do
  leech model train --train-data merged/train.npz --val-data merged/val.npz \
    --model "$architecture" --model-config small.json --output-dir "model_$architecture" \
    --epochs 2 --batch-size 16 --device cpu --seed 1 --num-out 4 --loss cross_entropy \
    --motif CCAGGC --motif-offset 2
done
echo '{"conv_channels": [4, 16, 32], "lstm_hidden": 16}' > small_lstm.json
base="ConvLSTMBase ConvLSTMBaseBN ConvLSTMBaseAttn ConvLSTMBaseBNAttn"
attention="ConvLSTMBaseAttn ConvLSTMBaseBNAttn ConvLSTMDwellAttn ConvLSTMDwellBNAttn
  ConvLSTMDwellGNAttn ConvLSTMDwellLNAttn"
for architecture in ConvLSTMDwellBN ConvLSTMBase ConvLSTMBaseBN $attention; do
  leech model train --train-data merged/train.npz --val-data merged/val.npz \
    --model "$architecture" --model-config small_lstm.json --output-dir "model_$architecture" \
    --epochs 2 --batch-size 16 --device cpu --seed 1 --num-out 4 --loss cross_entropy \
    --motif CCAGGC --motif-offset 2
done
# leech's hand-written classes kennel implements, small (SignalCNN and ConvLSTMRemoraBase are
# made by make_config_built.py: leech's loader builds those two at their defaults whatever the
# config says, so no bundle its trainer writes loads in leech predict itself)
echo '{"d_model": 32, "nhead": 4, "num_layers": 1, "dim_feedforward": 64}' > small_tf.json
echo '{"base_channels": 16}' > small_resnet.json
echo '{"size": 16}' > small_remora.json
echo '{"base_channels": 4, "num_blocks": 2}' > small_convonly.json
handwritten="TransformerDwell TransformerDwellResidual ResNetDwell ConvOnly ConvLSTMRemora"
for architecture in $handwritten; do
  case "$architecture" in
    ResNetDwell) settings=small_resnet.json ;;
    ConvOnly) settings=small_convonly.json ;;
    ConvLSTMRemora) settings=small_remora.json ;;
    *) settings=small_tf.json ;;
  esac
  leech model train --train-data merged/train.npz --val-data merged/val.npz \
    --model "$architecture" --model-config "$settings" --output-dir "model_$architecture" \
    --epochs 2 --batch-size 16 --device cpu --seed 1 --num-out 4 --loss cross_entropy \
    --motif CCAGGC --motif-offset 2
done
# sequence masking (leech#256: prepare --mask-seq-side blanks the bases on one side of the focus
# base; the configs record it and leech predict applies it, on its Python extraction path): small
# TCNDwells, signal_kmer masked left and right, base_onehot masked left
for side in left right; do
  for class in Ala Gly Leu Phe; do
    leech data prepare --pod5 "$shared/data/fx.pod5" --bam "split/class_$class.bam" \
      --reference-fasta ref.fa -o "prep_${side}_$class" --motif CCAGGC --motif-offset 2 \
      --label "$class" --no-split --workers 2 --seed 1 --feature-start -7 --feature-end 7 \
      --mask-seq-side "$side"
  done
  leech data merge -i "Ala=prep_${side}_Ala/all.npz" -i "Gly=prep_${side}_Gly/all.npz" \
    -i "Leu=prep_${side}_Leu/all.npz" -i "Phe=prep_${side}_Phe/all.npz" -o "merged_$side" --seed 1
done
# a base-defined signal window (prepare --signal-context-bases 8 4: from the first sample of base
# -8 to the last of base +4, zero-padded or centre-cropped to the model's 400 samples)
for class in Ala Gly Leu Phe; do
  leech data prepare --pod5 "$shared/data/fx.pod5" --bam "split/class_$class.bam" \
    --reference-fasta ref.fa -o "prep_bases_$class" --motif CCAGGC --motif-offset 2 \
    --label "$class" --no-split --workers 2 --seed 1 --feature-start -7 --feature-end 7 \
    --signal-context-bases 8 4
done
leech data merge -i Ala=prep_bases_Ala/all.npz -i Gly=prep_bases_Gly/all.npz \
  -i Leu=prep_bases_Leu/all.npz -i Phe=prep_bases_Phe/all.npz -o merged_bases --seed 1
leech model train --train-data merged_bases/train.npz --val-data merged_bases/val.npz \
  --model TCNDwell --model-config small.json --output-dir model_context_bases --epochs 2 \
  --batch-size 16 --device cpu --seed 1 --num-out 4 --loss cross_entropy --motif CCAGGC \
  --motif-offset 2 --seq-encoding signal_kmer
# per-amino-acid dwell templates (model train --dwell-template-table; dwell_template.tsv is made
# up, positions -6..+6 of the -7..+7 window, with an entry of 0 and a missing one)
leech model train --train-data merged/train.npz --val-data merged/val.npz --model TCNDwell \
  --model-config small.json --output-dir model_dwell_template --epochs 2 --batch-size 16 \
  --device cpu --seed 1 --num-out 4 --loss cross_entropy --motif CCAGGC --motif-offset 2 \
  --dwell-template-table "$here/dwell_template.tsv"
masked="mask_left mask_right mask_left_onehot"
for name in $masked; do
  case "$name" in
    mask_right) data=merged_right encoding=signal_kmer ;;
    mask_left) data=merged_left encoding=signal_kmer ;;
    *) data=merged_left encoding=base_onehot ;;
  esac
  leech model train --train-data "$data/train.npz" --val-data "$data/val.npz" --model TCNDwell \
    --model-config small.json --output-dir "model_$name" --epochs 2 --batch-size 16 \
    --device cpu --seed 1 --num-out 4 --loss cross_entropy --motif CCAGGC --motif-offset 2 \
    --seq-encoding "$encoding"
done
predict() {  # bundle directory, name, leech predict options
  leech model bundle --model-dir "$1" -o "$here/fx_$2.pt" -v 0.1.0 --comparison-type multiclass
  chmod 644 "$here/fx_$2.pt"
  leech predict --bundle "$here/fx_$2.pt" --all --pod5 "$shared/data/fx.pod5" \
    --bam "$shared/data/fx.bam" --reference-fasta "$shared/data/reference.fa" --device cpu \
    --no-compile -o "$here/fx.$2.default.bam" "${@:3}"
}
predict model tcndwell_wide
for architecture in TCNDwellGN TCNDwellLN TCNDwellResidual TCNDwellResidualGN TCNDwellResidualLN \
  ConvLSTMDwellBN ConvLSTMDwellAttn ConvLSTMDwellBNAttn ConvLSTMDwellGNAttn ConvLSTMDwellLNAttn \
  $experimental $handwritten; do
  predict "model_$architecture" "$architecture"
done
for architecture in $base; do
  predict "model_$architecture" "$architecture" --backend python
done
# the masked bundles' tags, and the sequence inputs leech predict handed each model
# (../shared/leech/scripts/dump_chunks.py), bit-packed one-hot, with a SHA-256 of each feature
# tensor (leech predict extracts masked chunks on its Python path), in masked_inputs.npz
for name in $masked; do
  predict "model_$name" "$name"
  python "$shared/scripts/dump_chunks.py" "$here/fx_$name.pt" "$shared/data/fx.pod5" \
    "$shared/data/fx.bam" "$shared/data/reference.fa" "dump_$name.bam" "dump_$name.npz"
done
python - "$here" $masked <<'PY'
import hashlib
import sys
from pathlib import Path

import numpy as np

here, names = Path(sys.argv[1]), sys.argv[2:]
arrays = {}
for name in names:
    with np.load(f"dump_{name}.npz") as dump:
        arrays[f"{name}.read_id"] = dump["read_id"]
        arrays[f"{name}.base_idx"] = dump["base_idx"]
        arrays[f"{name}.shape"] = np.array(dump["sequence"].shape)
        arrays[f"{name}.sequence"] = np.packbits(dump["sequence"], axis=-1)
        arrays[f"{name}.features_sha256"] = np.array(
            [hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest()
             for row in dump["features"]]
        )
np.savez_compressed(here / "masked_inputs.npz", **arrays)
PY
# the base-window bundle's tags, and a SHA-256 of each signal, sequence and feature tensor leech
# predict handed it (context_bases_inputs.npz)
predict model_context_bases context_bases
python "$shared/scripts/dump_chunks.py" "$here/fx_context_bases.pt" "$shared/data/fx.pod5" \
  "$shared/data/fx.bam" "$shared/data/reference.fa" dump_context_bases.bam dump_context_bases.npz
python - "$here" <<'PY'
import hashlib
import sys
from pathlib import Path

import numpy as np

here = Path(sys.argv[1])
with np.load("dump_context_bases.npz") as dump:
    digests = {
        name: np.array([hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest()
                        for row in dump[name]])
        for name in ("signal", "sequence", "features")
    }
    np.savez_compressed(
        here / "context_bases_inputs.npz", read_id=dump["read_id"], base_idx=dump["base_idx"],
        shape=np.array(dump["signal"].shape), signal_sha256=digests["signal"],
        sequence_sha256=digests["sequence"], features_sha256=digests["features"],
    )
PY
# the template bundle's tags, and the template rows leech predict appended to each chunk's
# features, with a SHA-256 of each whole feature tensor (dwell_template_inputs.npz). leech 0.16.0 predicts a multiclass bundle with the table
# its config names, read from the working directory, not the bundle's embedded copy
cp model_dwell_template/dwell_template_table.tsv .
predict model_dwell_template dwell_template
python "$shared/scripts/dump_chunks.py" "$here/fx_dwell_template.pt" "$shared/data/fx.pod5" \
  "$shared/data/fx.bam" "$shared/data/reference.fa" dump_dwell_template.bam \
  dump_dwell_template.npz
python - "$here" <<'PY'
import hashlib
import sys
from pathlib import Path

import numpy as np

with np.load("dump_dwell_template.npz") as dump:
    np.savez_compressed(
        Path(sys.argv[1]) / "dwell_template_inputs.npz", read_id=dump["read_id"],
        template_rows=dump["features"][:, 12:],
        features_sha256=np.array([hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest()
                                  for row in dump["features"]]),
    )
PY
# leech's own logits for each attention, experimental TCN and hand-written bundle on the first
# 64 chunks leech
# scored with the shared TCNDwell (its dump's signal channels the model takes, sequence and
# 11-base features: these networks take any feature width), through the loader leech predict uses
python - "$here" "$shared" $attention $experimental $handwritten <<'PY'
import sys
from pathlib import Path

import numpy as np
import torch
from leech.bundling import load_model_from_multiclass_bundle

here, shared, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
chunks = np.load(shared / "dumps" / "fx.tcndwell.chunks.npz")
signal = torch.from_numpy(chunks["signal"][:64])
sequence = torch.from_numpy(chunks["sequence"][:64]).float()
features = torch.from_numpy(chunks["features"][:64])
logits = {}
for name in names:
    model, config = load_model_from_multiclass_bundle(here / f"fx_{name}.pt", device="cpu")
    model.eval()
    channels = int(config.get("signal_in_channels", 1))
    with torch.no_grad():
        logits[name] = model(signal[:, :channels], sequence, features).numpy()
np.savez(here / "leech_logits.npz", **logits)
PY
# leech's logits for small random-weight networks whose configs set what these bundles leave at
# leech's defaults (attention heads, the motor range, the dwell branch, a one-channel split TCN)
python "$here/make_overrides.py"
# the fixture reads with indels edited around the motif, and with alignments cut short near it,
# with leech predict's tags for each (skip_motif_indels, recover_softclip_signal)
python "$here/make_motif_indels.py" "$shared"
python "$here/make_softclips.py" "$shared"
# a basecall-anchored bundle (make_basecall.py), also on the reads make_softclips.py cut short,
# and one trained without signal-map refinement (make_unrefined.py)
python "$here/make_basecall.py" "$shared"
python "$here/make_unrefined.py" "$shared"
# the wide-window TCNDwell with its window in leech's legacy config keys (make_legacy_windows.py)
python "$here/make_legacy_windows.py" "$shared"
# the fixture's TCNDwell through leech's Python extraction: --backend python, and no leech-core
python "$here/make_backends.py" "$shared"
# the fixture's TCNDwell with other signal normalisations (signal_norm)
python "$here/make_signal_norms.py" "$shared"
# ConvLSTMRemoraBase and SignalCNN, predicted with leech's loader building them from the config
# (after leech_logits.npz is written: it adds their logits)
python "$here/make_config_built.py" "$shared"
# leech predict's TSV output (-o calls.tsv), after make_motif_indels.py's reads exist
python "$here/make_tsv.py" "$shared"
