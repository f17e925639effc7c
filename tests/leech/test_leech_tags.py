"""Tags from model outputs equal what ``leech predict`` wrote, record for record."""

from __future__ import annotations

import array
import json
from pathlib import Path

import numpy as np
import pysam
import pytest
from kennel.trna.leech_tags import (
    AGGREGATIONS,
    BELOW_THRESHOLD,
    TagOptions,
    binary_tags,
    multiclass_tags,
    pairwise_call,
    pairwise_tags,
    to_uint8,
    to_uint8_truncated,
    write_tags,
)
from leech_reference import INPUT_BAM, PREDICTIONS

CLASSES = ("Ala", "Gly", "Leu", "Phe")


def kept_input_records() -> list[pysam.AlignedSegment]:
    """The records leech predict writes: primary, mapped, with mv+ns and a SEQ, in file order."""
    kept = []
    with pysam.AlignmentFile(str(INPUT_BAM), check_sq=False) as bam:
        for record in bam:
            if record.is_unmapped or record.is_secondary or record.is_supplementary:
                continue
            if record.has_tag("mv") and record.has_tag("ns") and record.query_sequence:
                kept.append(record)
    return kept


def first_chunks(dump) -> dict[str, int]:
    """Index of each read's first chunk in scoring order."""
    first: dict[str, int] = {}
    for index, read_id in enumerate(dump["read_id"]):
        first.setdefault(str(read_id), index)
    return first


def assert_records_match(prediction: str, tags_for) -> int:
    """Every output record is its input record with ``tags_for(read_id)`` appended; returns
    how many records carry prediction tags."""
    inputs = kept_input_records()
    tagged = 0
    with pysam.AlignmentFile(str(PREDICTIONS[prediction]), check_sq=False) as bam:
        outputs = list(bam)
    assert len(outputs) == len(inputs) == 398
    for before, after in zip(inputs, outputs, strict=True):
        assert after.query_name == before.query_name
        assert after.flag == before.flag and after.reference_start == before.reference_start
        expected = tags_for(before.query_name)
        tagged += bool(expected)
        assert after.get_tags(with_value_type=True) == (
            before.get_tags(with_value_type=True) + expected
        ), f"{prediction}: {after.query_name}"
    return tagged


MULTICLASS_RUNS = {
    "tcndwell.default": ("tcndwell", TagOptions()),
    "tcndwell.raw": ("tcndwell", TagOptions(raw=True)),
    "tcndwell.minconf150_minmargin60": ("tcndwell", TagOptions(min_confidence=150, min_margin=60)),
    "tcndwell.minmargin60_abstain_junction": (
        "tcndwell",
        TagOptions(min_margin=60, abstain_on_junction_indel=True),
    ),
    "tcndwell_checkpoint.default": ("tcndwell", TagOptions()),
    "convlstmdwell.default": ("convlstmdwell", TagOptions()),
}


@pytest.mark.parametrize("prediction", MULTICLASS_RUNS)
def test_multiclass_tags_match_leech_predict(dumps, prediction):
    """leech's own logits (the dump) through kennel's tag rules give leech's BAM."""
    name, options = MULTICLASS_RUNS[prediction]
    dump = dumps[name]
    first = first_chunks(dump)

    def tags_for(read_id):
        if read_id not in first:
            return []
        i = first[read_id]
        return multiclass_tags(
            dump["logits"][i],
            CLASSES,
            junction_indel=int(dump["junction_indel"][i]),
            junction_mapped=bool(dump["junction_mapped"][i]),
            options=options,
        )

    assert assert_records_match(prediction, tags_for) == 392


def test_unc_thresholds_are_exercised(dumps):
    """The thresholded run really abstains (so matching it tests the rule), the default none."""
    dump = dumps["tcndwell"]
    calls = [
        multiclass_tags(logits, CLASSES, 0, True, TagOptions(min_confidence=150, min_margin=60))
        for logits in dump["logits"]
    ]
    assert sum(tags[0][1] == BELOW_THRESHOLD for tags in calls) == 346


def test_pairwise_bundle_tags_match_leech_predict(gly_phe_logits, dumps):
    """kennel's Gly_Phe network on the dumped inputs, through kennel's vote rules."""
    dump = dumps["tcndwell"]
    first = first_chunks(dump)

    def tags_for(read_id):
        if read_id not in first:
            return []
        return pairwise_tags([gly_phe_logits[first[read_id], 0]], ["Gly_Phe"])

    assert assert_records_match("gly_phe_pair.all", tags_for) == 392


def test_single_binary_model_tags_match_leech_predict(gly_phe_logits, dumps):
    dump = dumps["tcndwell"]
    chunks: dict[str, list[int]] = {}
    for index, read_id in enumerate(dump["read_id"]):
        chunks.setdefault(str(read_id), []).append(index)

    def tags_for(read_id):
        if read_id not in chunks:
            return []
        indices = chunks[read_id]
        return binary_tags(
            [gly_phe_logits[i, 0] for i in indices], [int(dump["base_idx"][i]) for i in indices]
        )

    assert assert_records_match("gly_phe_pair.default", tags_for) == 392


# ---- the rules, on hand-made outputs


def test_uint8_rounds_half_to_even_and_ml_truncates():
    halves = [k + 0.5 for k in range(255) if ((k + 0.5) / 255) * 255 == k + 0.5]
    assert halves  # exact halves exist in float64
    for half in halves:
        assert to_uint8(half / 255) == round(half)
        assert to_uint8_truncated(half / 255) == int(half)
    assert to_uint8(-0.1) == 0 and to_uint8(1.2) == 255
    assert to_uint8(0.999) == 255 and to_uint8_truncated(0.999) == 254


def test_margin_and_junction_abstention():
    logits = np.log(np.array([0.40, 0.35, 0.15, 0.10], dtype=np.float32))
    strict = TagOptions(min_margin=60)
    intact = multiclass_tags(logits, CLASSES, 0, True, strict)
    assert intact[0] == ("aa", BELOW_THRESHOLD, "Z")  # margin 13 < 60
    assert intact[1] == ("ac", 102, "C") and intact[2] == ("am", 13, "C")
    lenient = TagOptions(min_margin=60, abstain_on_junction_indel=True)
    assert multiclass_tags(logits, CLASSES, 0, True, lenient)[0] == ("aa", "Ala", "Z")
    for indel, mapped in ((2, True), (0, False)):
        tags = multiclass_tags(logits, CLASSES, indel, mapped, lenient)
        assert tags[0] == ("aa", BELOW_THRESHOLD, "Z")
        assert tags[3:5] == [("ji", indel, "i"), ("jm", int(mapped), "C")]
    assert multiclass_tags(logits, CLASSES, 0, True, TagOptions(min_confidence=103))[0][1] == "unc"


def test_multiclass_tag_layout_ties_and_charging():
    tags = multiclass_tags([1.0, 2.0, 2.0, 0.0], CLASSES, charging=0.5)
    assert [t[0] for t in tags] == ["aa", "ac", "am", "pn", "pp", "pc"]  # no ji/jm without motif
    assert tags[0] == ("aa", "Gly", "Z")  # first of two equal maxima
    assert tags[2] == ("am", 0, "C")
    assert tags[-1] == ("pc", 128, "C")  # round(127.5) is 128 (even)
    raw = multiclass_tags([1.0, 2.0, 2.0, 0.0], CLASSES, charging=0.3, options=TagOptions(raw=True))
    assert raw[-1] == ("pc", float(np.float32(0.3)), "f")
    assert raw[4][1].typecode == "f"
    unnamed = multiclass_tags([0.0, 1.0, 0.0], ())
    assert unnamed[0] == ("aa", "1", "Z") and unnamed[3] == ("pn", "0,1,2", "Z")


def test_pairwise_votes_labels_and_one_vs_all():
    pairs = ["Ala_Gly", "Ala_Phe", "Gly_Phe"]
    # sigmoid(0) = 0.5 everywhere: equal votes, the first class seen wins
    tags = pairwise_tags([0.0, 0.0, 0.0], pairs)
    assert tags[0] == ("aa", "Ala", "Z") and tags[1] == ("ac", to_uint8(1 / 3), "C")
    assert tags[3] == ("pn", "Ala_Gly,Ala_Phe,Gly_Phe", "Z")
    assert tags[4] == ("pp", array.array("B", [128, 128, 128]), "B")
    # pair_labels override the name split (class names with underscores)
    labelled = pairwise_tags([5.0], ["x"], pair_classes={"x": ["tRNA_a", "tRNA_b"]})
    assert labelled[0] == ("aa", "tRNA_b", "Z")
    ova = pairwise_tags([3.0, -3.0], ["Ala_notAla", "Gly_notGly"], one_vs_all=True)
    assert ova[0] == ("aa", "Gly", "Z")
    gly_score = 1 - float(np.float32(1 / (1 + np.exp(3.0))))  # 1 - sigmoid(-3)
    assert ova[1] == ("ac", to_uint8(gly_score), "C")


AGGREGATION_REFERENCE = Path(__file__).with_name("aggregation_reference.json")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_pairwise_aggregations_match_leech(aggregation):
    """`aa` and `ac` of every case equal leech 0.16.0's own aggregation function's label and
    confidence (run from leech's wheel in Python 3.12 by make_aggregation_reference.py), `ac`
    as float and as uint8, and the float64 confidence exactly. `pp` holds the sigmoids the
    reference was made from (both float32 torch.sigmoid on this CPU, as leech computes them)."""
    cases = json.loads(AGGREGATION_REFERENCE.read_text())["cases"]
    for case in cases:
        label, confidence = case[aggregation]
        raw = pairwise_tags(
            case["logits"], case["pairs"], pair_classes=case["pair_labels"],
            options=TagOptions(raw=True, aggregation=aggregation),
        )  # fmt: skip
        where = f"{case['case']}: {case['logits']}"
        assert raw[0] == ("aa", label, "Z"), where
        assert raw[1] == ("ac", float(np.float32(confidence)), "f"), where
        assert list(raw[4][1]) == [float(np.float32(p)) for p in case["probabilities"]], where
        # the float64 confidence itself, before any rounding: leech's sums, as Python >= 3.12
        # (which leech needs) computes them, whichever Python runs this test
        sides = [
            tuple(case["pair_labels"][pair]) if case["pair_labels"] else tuple(pair.split("_", 1))
            for pair in case["pairs"]
        ]
        found = pairwise_call(sides, case["probabilities"], aggregation)
        assert found == (label, confidence), where
        quantised = pairwise_tags(
            case["logits"], case["pairs"], pair_classes=case["pair_labels"],
            options=TagOptions(aggregation=aggregation),
        )  # fmt: skip
        assert quantised[1] == ("ac", to_uint8(confidence), "C"), where


def test_aggregation_reference_tells_the_methods_apart():
    """The reference cases would catch one method run for another."""
    cases = json.loads(AGGREGATION_REFERENCE.read_text())["cases"]
    for one, other in [("naive", "weighted"), ("naive", "tournament"), ("weighted", "tournament")]:
        assert sum(case[one][0] != case[other][0] for case in cases) >= 5, (one, other)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        pairwise_tags([0.0], ["A_B"], options=TagOptions(aggregation="vote"))


def test_binary_chunks_sorted_by_focus_base():
    tags = binary_tags([0.0, 10.0, -10.0], [40, 12, 40])
    assert tags == [
        ("MP", array.array("i", [12, 40, 40]), "B"),
        ("ML", array.array("B", [254, 127, 0]), "B"),
    ]


def test_tags_write_back_through_pysam():
    header = pysam.AlignmentHeader.from_dict({"HD": {"VN": "1.6"}, "SQ": [{"SN": "c", "LN": 9}]})
    record = pysam.AlignedSegment(header)
    tags = multiclass_tags(
        [0.1, 0.2, 0.3, 0.4], CLASSES, 1, True, TagOptions(raw=True), 0.7
    ) + binary_tags([0.5], [3])
    write_tags(record, tags)
    assert record.get_tags(with_value_type=True) == tags
