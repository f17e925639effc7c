"""Reading variants: one row per alt allele, and one clear line for every bad record."""

from __future__ import annotations

import gzip

import pysam
import pytest
from hound_reference import read_records
from kennel.errors import KennelError
from kennel.snp.genome import check_against_genome
from kennel.snp.vcf import numbered_lines, read_variants
from pysam.libcbgzf import BGZFile
from snp_helpers import vcf_lines, write_vcf


def test_one_row_per_alt_allele_in_vcf_order(snp_sim):
    variants = read_variants(snp_sim["variants"]).variants
    with pysam.VariantFile(str(snp_sim["variants"])) as vcf:
        expected = [
            (number, record.id, record.chrom, record.pos, record.ref, alt)
            for number, record in enumerate(vcf, start=1)
            for alt in record.alts
        ]
    actual = [(v.record, v.id, v.chrom, v.pos, v.ref, v.alt) for v in variants]
    assert actual == expected
    assert any(a[0] == b[0] for a, b in zip(actual, actual[1:], strict=False))  # multi-allelic
    assert {v.indel_size > 0 for v in variants} == {True, False}
    assert any(v.indel_size < 0 for v in variants)


def test_every_variant_matches_the_genome(snp_sim):
    variants = read_variants(snp_sim["variants"]).variants
    keep = check_against_genome(variants, snp_sim["genome"], snp_sim["variants"])
    assert keep.all()


def edited(snp_sim, tmp_path, edit) -> tuple:
    header, records = vcf_lines(snp_sim["variants"])
    records = records[:6]
    fields = records[3].split("\t")
    header, records = edit(header, records, fields)
    return write_vcf(tmp_path / "edited.vcf", header, records)


def set_field(column, value):
    def edit(header, records, fields):
        fields[column] = value
        records[3] = "\t".join(fields)
        return header, records

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            set_field(1, "fifty"),
            r"record 4 \(after chr1:\d+ rs3\): malformed VCF record: 'chr1\\tfifty",
        ),
        (set_field(3, "AQ"), r"record 4 \(chr1:\d+ rs4\): REF 'AQ' is not a sequence"),
        (
            lambda header, records, fields: (header, [*records[:3], "", *records[3:]]),
            r"record 4 \(after chr1:\d+ rs3\): malformed VCF record: '' \(a blank line\)",
        ),
        (
            lambda header, records, fields: (header, [*records[:3], "\t".join(fields[:5])]),
            r"record 4 \(after chr1:\d+ rs3\): .*\(5 tab-separated column\(s\); a VCF record has 8",
        ),
        (set_field(1, "3"), r"record 4 \(chr1:3 rs4\): position 3 comes after \d+"),
    ],
)
def test_bad_records_are_one_line_naming_file_and_record(snp_sim, tmp_path, edit, expected):
    path = edited(snp_sim, tmp_path, edit)
    with pytest.raises(KennelError, match=expected) as raised:
        read_variants(path)
    assert str(raised.value).startswith(f"{path}: ")
    assert "\n" not in str(raised.value)


def test_alleles_with_no_sequence_get_no_row_and_are_counted(snp_sim, tmp_path):
    header, records = vcf_lines(snp_sim["variants"])
    first = records[0].split("\t")
    chrom, pos, ref = first[0], int(first[1]), first[3]

    def record(number, alt, position=pos):
        return "\t".join([chrom, str(position), f"s{number}", ref, alt, ".", ".", "."])

    lines = [
        record(1, "*,G"),  # GATK's spanning deletion first: G is still the record's ALT 2
        record(2, "<DEL>"),
        record(3, "."),
        record(4, "T,<NON_REF>"),
        record(5, "<DEL>", position=pos - 1),  # a record with no row is still checked for order
    ]
    path = write_vcf(tmp_path / "symbolic.vcf", header, lines[:4])
    read = read_variants(path)
    assert [(v.id, v.allele, v.alt, v.row_id) for v in read.variants] == [
        ("s1", 2, "G", "s1:2"),
        ("s4", 1, "T", "s4"),
    ]
    assert read.unscored == 4
    assert read.first_unscored == f"record 1 ({chrom}:{pos} s1) ALT '*'"
    first_only = read_variants(path, alts="first")
    assert [(v.id, v.alt) for v in first_only.variants] == [("s4", "T")]
    assert first_only.unscored == 3  # s1's '*', s2, s3; ALTs after the first are not read

    unsorted = write_vcf(tmp_path / "unsorted.vcf", header, lines)
    with pytest.raises(KennelError, match=rf"record 5 \({chrom}:{pos - 1} s5\): position"):
        read_variants(unsorted)


def test_non_contiguous_chromosomes_are_refused(snp_sim, tmp_path):
    header, records = vcf_lines(snp_sim["variants"])
    chr2 = [r for r in records if r.startswith("chr2\t")][:1]
    path = write_vcf(tmp_path / "mixed.vcf", header, records[:2] + chr2 + records[2:3])
    with pytest.raises(KennelError, match=r"record 4 \(chr1:.*records of chr1 are not contiguous"):
        read_variants(path)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(KennelError, match="VCF not found"):
        read_variants(tmp_path / "absent.vcf")
    (tmp_path / "junk.vcf").write_bytes(b"\x00\x01 not a vcf\n")
    with pytest.raises(KennelError, match=r"junk.vcf: record 1: .*4 column\(s\); a record needs"):
        read_variants(tmp_path / "junk.vcf")
    (tmp_path / "empty.vcf").write_bytes(b"")
    with pytest.raises(KennelError, match="empty.vcf: no records and no #CHROM header line"):
        read_variants(tmp_path / "empty.vcf")
    (tmp_path / "cut.vcf.gz").write_bytes(gzip.compress(b"##fileformat=VCFv4.2\n")[:-12])
    with pytest.raises(KennelError, match="cut.vcf.gz: not a readable VCF"):
        read_variants(tmp_path / "cut.vcf.gz")


def test_genome_checks(snp_sim, tmp_path):
    header, records = vcf_lines(snp_sim["variants"])
    fields = records[2].split("\t")
    genome_base = pysam.FastaFile(str(snp_sim["genome"])).fetch("chr1", int(fields[1]) - 1)[0]
    wrong = next(base for base in "ACGT" if base != genome_base.upper())
    mismatched = write_vcf(
        tmp_path / "mismatch.vcf",
        header,
        records[:2] + ["\t".join([*fields[:3], wrong, "G" if wrong != "G" else "T", *fields[5:]])],
    )
    variants = read_variants(mismatched).variants
    with pytest.raises(KennelError, match=rf"record 3 \(chr1:{fields[1]} rs3\): REF {wrong} does"):
        check_against_genome(variants, snp_sim["genome"], mismatched)
    keep = check_against_genome(variants, snp_sim["genome"], mismatched, ref_mismatch="skip")
    assert keep.tolist() == [True] * (len(variants) - 1) + [False]

    header_x = [*header[:-1], "##contig=<ID=chrX,length=1000>", header[-1]]
    absent = write_vcf(tmp_path / "absent.vcf", header_x, ["chrX\t5\tx1\tA\tC\t.\t.\t."])
    with pytest.raises(KennelError, match=r"record 1 \(chrX:5 x1\): chromosome chrX is not in"):
        check_against_genome(read_variants(absent).variants, snp_sim["genome"], absent)

    beyond = write_vcf(tmp_path / "beyond.vcf", header, ["chr1\t50001\tb1\tA\tC\t.\t.\t."])
    with pytest.raises(KennelError, match="past the end of chr1"):
        check_against_genome(read_variants(beyond).variants, snp_sim["genome"], beyond)


def hound_forms(snp_sim, tmp_path) -> dict:
    """The demo VCF in the looser forms hound_snp reads (the Borzoi tutorials' VCFs are the
    first two): seven tab-separated columns under only ##fileformat; five space-separated
    columns and no header; the first with CRLF line ends, bgzipped; the strict VCF compressed
    with plain gzip, not bgzip."""
    header, records = vcf_lines(snp_sim["variants"])
    seven = ["\t".join(record.split("\t")[:7]) for record in records]
    five = ["  ".join(record.split("\t")[:5]) for record in records]
    strict = "\n".join([*header, *records]) + "\n"
    (tmp_path / "gzipped.vcf.gz").write_bytes(gzip.compress(strict.encode()))
    crlf = "\r\n".join(["##fileformat=VCFv4.2", *seven]) + "\r\n"
    with BGZFile(str(tmp_path / "crlf.vcf.gz"), "wb") as handle:
        handle.write(crlf.encode())
    return {
        "tutorial": write_vcf(tmp_path / "tutorial.vcf", ["##fileformat=VCFv4.2"], seven),
        "headerless": write_vcf(tmp_path / "headerless.vcf", [], five),
        "crlf_bgzipped": tmp_path / "crlf.vcf.gz",
        "gzipped": tmp_path / "gzipped.vcf.gz",
    }


@pytest.mark.parametrize("form", ["tutorial", "headerless", "crlf_bgzipped", "gzipped"])
def test_the_forms_hound_snp_reads_are_read_as_it_reads_them(snp_sim, tmp_path, form):
    """Each form gives the strict VCF's variants, and its records as hound_snp's reader
    (hound_reference, after baskerville's vcf_snps: whitespace split, first five columns)."""
    path = hound_forms(snp_sim, tmp_path)[form]
    strict = read_variants(snp_sim["variants"])
    assert read_variants(path) == strict
    hound = [(r.rsid, r.chrom, r.pos, r.ref, r.alt) for r in read_records(path)]
    first = read_variants(path, alts="first").variants
    assert [(v.id, v.chrom, v.pos, v.ref, v.alt) for v in first] == hound
    assert len(hound) == len({v.record for v in strict.variants}) > 0


def _loose(snp_sim, tmp_path, edit):
    _, records = vcf_lines(snp_sim["variants"])
    lines = [" ".join(record.split("\t")[:5]) for record in records[:4]]
    return write_vcf(tmp_path / "loose.vcf", ["##fileformat=VCFv4.2"], edit(lines))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda lines: [*lines[:2], " ".join(lines[2].split()[:4]), *lines[3:]],
            r"record 3 \(after chr1:\d+ rs\d+\): malformed VCF record: 'chr1 \d+ rs\d+ [ACGT]+' "
            r"\(4 column\(s\); a record needs at least 5: CHROM POS ID REF ALT\)",
        ),
        (
            lambda lines: [*lines[:2], "# a comment", *lines[2:]],
            r"record 3: a '#' line after the records",
        ),
        (lambda lines: [], r"no records and no #CHROM header line: not a VCF"),
    ],
    ids=["short_record", "hash_after_records", "header_only"],
)
def test_bad_files_of_the_looser_form_are_one_line(snp_sim, tmp_path, edit, expected):
    """Each names the file and the record, quoting the line as the file has it."""
    path = _loose(snp_sim, tmp_path, edit)
    with pytest.raises(KennelError, match=expected) as raised:
        read_variants(path)
    assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)


def test_a_copy_that_cannot_be_written_names_tmpdir_not_the_vcf(snp_sim, tmp_path, monkeypatch):
    import tempfile

    path = hound_forms(snp_sim, tmp_path)["tutorial"]
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where TMPDIR's directory should be")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    expected = r"tutorial.vcf: cannot make a directory for its VCF copy"
    with pytest.raises(KennelError, match=expected):
        read_variants(path)


def test_a_copy_that_cannot_be_written_is_not_blamed_on_the_vcf(snp_sim, tmp_path, monkeypatch):
    import errno

    import kennel.snp.vcf

    class FullDisk(BGZFile):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    path = hound_forms(snp_sim, tmp_path)["tutorial"]
    monkeypatch.setattr(kennel.snp.vcf, "BGZFile", FullDisk)
    with pytest.raises(KennelError, match=r"tutorial.vcf: cannot write its VCF copy in .*space"):
        read_variants(path)


def test_a_corrupt_gzip_is_not_a_readable_vcf(snp_sim, tmp_path):
    body = hound_forms(snp_sim, tmp_path)["gzipped"].read_bytes()
    corrupt = tmp_path / "corrupt.vcf.gz"
    corrupt.write_bytes(body[:200] + bytes(64) + body[264:])
    with pytest.raises(KennelError, match=r"corrupt.vcf.gz: not a readable VCF"):
        read_variants(corrupt)


def test_a_plain_gzip_vcf_is_read_and_sliced_as_the_same_eight_columns(snp_sim, tmp_path):
    """Read through a copy cut to the fixed columns, its slices hold the same lines the scorer
    read: a malformed sample column, never read, fails neither."""
    header, records = vcf_lines(snp_sim["variants"])
    header[-1] += "\tFORMAT\ts1"
    with_samples = [f"{record}\tGT\t0/1" for record in records]
    with_samples[2] = f"{records[2]}\tGT:DP\tnot-a-genotype:x"
    text = "\n".join([*header, *with_samples]) + "\n"
    path = tmp_path / "samples.vcf.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert read_variants(path) == read_variants(snp_sim["variants"])
    lines = [line for record, line in numbered_lines(path) if record or line.startswith(b"#C")]
    assert {len(line.split(b"\t")) for line in lines} == {8}
