#!/usr/bin/env bash
# Remakes fx_tcndwell_wide.pt and fx.tcndwell_wide.default.bam: a TCNDwell that leech 0.16.0
# trains on a feature window of bases -7..+7 (leech data prepare --feature-start -7
# --feature-end 7; its config records kmer_len 11, feature_start -7, feature_end 7), and
# leech predict's tags with it on the shared fixture reads. The rest follows
# ../shared/leech/README.md's recipe for its TCNDwell bundle. Needs leech in a Python 3.12
# environment (not in CI):
#   python3.12 -m venv /opt/leech-venv
#   /opt/leech-venv/bin/pip install leech==0.16.0 leech-core==0.16.0
# Usage: bash tests/leech/wide_tcn/make.sh [path to ../shared/leech]
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
leech model bundle --model-dir model -o "$here/fx_tcndwell_wide.pt" -v 0.1.0 \
  --comparison-type multiclass
leech predict --bundle "$here/fx_tcndwell_wide.pt" --all --pod5 "$shared/data/fx.pod5" \
  --bam "$shared/data/fx.bam" --reference-fasta "$shared/data/reference.fa" --device cpu \
  --no-compile -o "$here/fx.tcndwell_wide.default.bam"
