"""Writes ``aggregation_reference.json``: leech 0.16.0's own pairwise aggregations of test votes.

``leech predict --aggregation naive|weighted|tournament`` turns a pairwise bundle's pair
sigmoids into the call (``aa``) and its confidence (``ac``). The three functions live in
``leech/inference/aggregation.py``, a module that imports nothing but ``logging``, so it is run
straight from leech's published wheel (leech's torch is not needed), in a Python that leech
runs on (>= 3.12: from 3.12 on, ``sum`` of floats is compensated, and 9 of these confidences
differ in their last bit from 3.11's running sum):

    pip download leech==0.16.0 --no-deps --python-version 3.12 --only-binary=:all: -d /tmp/lw
    python tests/leech/make_aggregation_reference.py /tmp/lw/leech-0.16.0-py3-none-any.whl \
        --python python3.12

The cases are seeded random logits (and a few edge cases: all votes equal, saturated sigmoids,
class names with underscores, incomplete pair sets, more than five classes for the tournament's
top five, a tie in its second round). The probabilities are computed as leech computes them
(float32 ``torch.sigmoid``, then Python floats) and stored beside leech's ``(label,
confidence)`` for each method, so the test needs neither leech nor this script.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch

OUTPUT = Path(__file__).with_name("aggregation_reference.json")
MODULE = "leech/inference/aggregation.py"
METHODS = ("naive", "weighted", "tournament")


# runs in the --python interpreter: leech's three functions over the cases read from stdin
LEECH_RUN = """
import importlib.util, json, sys

spec = importlib.util.spec_from_file_location("leech_aggregation", sys.argv[1])
leech = importlib.util.module_from_spec(spec)
spec.loader.exec_module(leech)
functions = {
    "naive": leech.aggregate_pairwise,
    "weighted": leech.aggregate_pairwise_weighted,
    "tournament": leech.aggregate_pairwise_tournament,
}
results = [
    {method: list(function(*case)[:2]) for method, function in functions.items()}
    for case in json.load(sys.stdin)
]
json.dump({"python": sys.version.split()[0], "results": results}, sys.stdout)
"""


def run_leech_aggregation(wheel: Path, python: str, cases: list) -> tuple[list, str, str]:
    """leech's (label, confidence) per method for each ``(pairs, probabilities, labels)``,
    computed by ``python``; with the module's sha256 and that Python's version."""
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "aggregation.py"
        source.write_bytes(archive.read(MODULE))
        done = subprocess.run(
            [python, "-c", LEECH_RUN, str(source)],
            input=json.dumps(cases), capture_output=True, text=True, check=True,
        )  # fmt: skip
        digest = hashlib.sha256(archive.read(MODULE)).hexdigest()
    output = json.loads(done.stdout)
    if tuple(map(int, output["python"].split(".")[:2])) < (3, 12):
        sys.exit(f"{python} is Python {output['python']}; leech runs on 3.12 or later")
    return output["results"], digest, output["python"]


def all_pairs(classes):
    return [f"{a}_{b}" for a, b in itertools.combinations(classes, 2)]


def cases(rng: np.random.Generator):
    three = ["Ala", "Gly", "Phe"]
    seven = ["Ala", "Arg", "Gly", "Leu", "Phe", "Ser", "Val"]
    for _ in range(8):
        yield "3 classes", all_pairs(three), None, rng.normal(0, 3, 3)
    for _ in range(24):
        yield "7 classes", all_pairs(seven), None, rng.normal(0, 2, 21)
    # one class wins many pairs narrowly, another few pairs strongly: naive, weighted and the
    # tournament's top five can disagree
    for _ in range(16):
        logits = rng.normal(0, 0.3, 21) + rng.choice([-6.0, 0.0, 6.0], 21, p=[0.2, 0.6, 0.2])
        yield "7 classes, mixed strength", all_pairs(seven), None, logits
    yield "all votes equal (p = 0.5)", all_pairs(seven), None, np.zeros(21)
    yield "saturated sigmoids", all_pairs(three), None, np.array([40.0, -40.0, 25.0])
    # round two ties A and B; round one ranked B first, so B wins (exact sigmoids 0, 0.5, 1)
    exact = {"A_B": 0.0, "A_F": 200.0, "A_G": 200.0, "B_F": -200.0, "B_G": -200.0, "F_G": 0.0}
    for a, b in itertools.product("AB", "CDE"):
        exact[f"{a}_{b}"] = -200.0
    for a, b in itertools.combinations("CDE", 2):
        exact[f"{a}_{b}"] = 0.0
    for a, b in itertools.product("CDE", "FG"):
        exact[f"{a}_{b}"] = -200.0
    yield "tournament round-two tie", list(exact), None, np.array(list(exact.values()))
    # pair_labels, as newer bundles record them: class names with underscores
    named = ["tRNA_Ala", "tRNA_Gly", "tRNA_Phe", "tRNA_Ser"]
    pairs = [f"p{i}" for i in range(6)]
    labels = {p: list(c) for p, c in zip(pairs, itertools.combinations(named, 2), strict=True)}
    for _ in range(4):
        yield "pair_labels", pairs, labels, rng.normal(0, 3, 6)
    # an incomplete pair set: classes met by one pair only, first seen as label 1
    partial = ["Gly_Ala", "Phe_Ala", "Leu_Ser", "Ser_Val", "Val_Arg", "Arg_Thr", "Thr_Ala"]
    for _ in range(6):
        yield "incomplete pair set", partial, None, rng.normal(0, 3, len(partial))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="leech-0.16.0-py3-none-any.whl")
    parser.add_argument(
        "--python", default=sys.executable, help="a Python >= 3.12 to run leech's functions"
    )
    args = parser.parse_args()
    records = []
    for what, pairs, labels, logits in cases(np.random.default_rng(20261205)):
        logits = np.asarray(logits, dtype=np.float32)
        probabilities = torch.sigmoid(torch.from_numpy(logits)).tolist()
        records.append(
            {
                "case": what,
                "pairs": pairs,
                "pair_labels": labels,
                "logits": logits.tolist(),
                "probabilities": probabilities,
            }
        )
    inputs = [[r["pairs"], r["probabilities"], r["pair_labels"]] for r in records]
    results, digest, version = run_leech_aggregation(args.wheel, args.python, inputs)
    for record, result in zip(records, results, strict=True):
        record.update(result)
    document = {
        "made_by": "tests/leech/make_aggregation_reference.py",
        "leech": args.wheel.name,
        "aggregation_py_sha256": digest,
        "python": version,
        "cases": records,
    }
    # one case a line: readable diffs without a line per float
    lines = ",\n".join(json.dumps(record) for record in document.pop("cases"))
    head = json.dumps(document, indent=1)[:-2]
    OUTPUT.write_text(f'{head},\n "cases": [\n{lines}\n ]\n}}\n')
    differ = sum(len({tuple(r[m]) for m in METHODS}) > 1 for r in records)
    print(f"{OUTPUT}: {len(records)} cases, {differ} where the methods disagree", file=sys.stderr)


if __name__ == "__main__":
    main()
