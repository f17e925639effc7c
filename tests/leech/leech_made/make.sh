#!/usr/bin/env bash
# Remakes this folder: bundles leech 0.16.0 trains on the shared fixture reads with a feature
# window of bases -7..+7 (leech data prepare --feature-start -7 --feature-end 7; the configs
# record kmer_len 11, feature_start -7, feature_end 7), and leech predict's tags with each:
# fx_tcndwell_wide.pt, a TCNDwell of leech's default size (../shared/leech/README.md's recipe
# otherwise), and fx_<architecture>.pt for the other architectures kennel implements, small
# (TCN: 16 channels, 3 layers; ConvLSTM: conv channels 4/16/32, LSTM 16; 2 epochs: the tags,
# not the accuracy, are the point). leech predict's default Rust backend refuses its own
# ConvLSTMBase bundles (num_features 1 against the 12 features it extracts), so those are
# predicted with --backend python. Training is seeded: a rerun
# writes the same tags (the bundles' zip timestamps differ). Needs leech in a Python 3.12
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
for architecture in TCNDwellGN TCNDwellLN TCNDwellResidual TCNDwellResidualGN TCNDwellResidualLN; do
  leech model train --train-data merged/train.npz --val-data merged/val.npz \
    --model "$architecture" --model-config small.json --output-dir "model_$architecture" \
    --epochs 2 --batch-size 16 --device cpu --seed 1 --num-out 4 --loss cross_entropy \
    --motif CCAGGC --motif-offset 2
done
echo '{"conv_channels": [4, 16, 32], "lstm_hidden": 16}' > small_lstm.json
for architecture in ConvLSTMDwellBN ConvLSTMBase ConvLSTMBaseBN; do
  leech model train --train-data merged/train.npz --val-data merged/val.npz \
    --model "$architecture" --model-config small_lstm.json --output-dir "model_$architecture" \
    --epochs 2 --batch-size 16 --device cpu --seed 1 --num-out 4 --loss cross_entropy \
    --motif CCAGGC --motif-offset 2
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
  ConvLSTMDwellBN; do
  predict "model_$architecture" "$architecture"
done
for architecture in ConvLSTMBase ConvLSTMBaseBN; do
  predict "model_$architecture" "$architecture" --backend python
done
