import functools
import os
import shlex
import sys

from kennel.config import (
    check_config,
    check_inputs_exist,
    coerce_config,
    load_schema,
    placeholder_resources,
    read_sample_sheet,
)
from kennel.errors import KennelError
from kennel.io.atomic import sweep_stale_temporaries
from snakemake.logging import logger

# envs/kennel.yaml installs kennel with `pip install -e ${KENNEL_SOURCE}`: Snakemake copies the
# env file into .snakemake/conda/ and conda runs pip from there, so a path relative to the file
# would miss this checkout. pip expands the variable; conda inherits it from this process.
# (Set, not read: the workflow needs no such variable from the user, so no envvars directive.)
os.environ.update(KENNEL_SOURCE=workflow.basedir)


def _stop(message):
    """End the run with `message` as the first and only line on stderr, exit code 2.

    A WorkflowError would wrap it in Snakemake's "WorkflowError in file ..., line N:" header
    and traceback lines, and the message a user greps for would no longer lead.
    """
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)


def _load_settings():
    """Check config and sheet with one-line errors, then let Snakemake fill the defaults."""
    schema = load_schema(workflow.source_path("../schemas/config.schema.yaml"))
    try:
        # `--config` gives nested values as strings; make them the schema's types in place
        config.update(coerce_config(config, schema))
        check_config(config, schema)
        validate(config, "../schemas/config.schema.yaml")
        rows = read_sample_sheet(
            config["samples"],
            load_schema(workflow.source_path("../schemas/samples.schema.yaml")),
        )
        check_inputs_exist(
            rows,
            {
                f"trna.{key}": config["trna"][key]
                for key in ("reference", "kmer_table", "bundle")
            },
            generated_dir=config["demo"]["dir"],
            sheet=config["samples"],
        )
    except KennelError as error:
        _stop(str(error))
    return rows


def _unset_cluster_resources():
    """Resources the SLURM profile still sets to its EDIT_ placeholders, as one line."""
    settings = workflow.resource_settings
    unset = placeholder_resources(
        {"default-resources": settings.default_resources or {}}
        | {
            f"set-resources {rule}": resources
            for rule, resources in settings.overwrite_resources.items()
        }
    )
    if not unset:
        return None
    return (
        f"profiles/slurm/config.yaml: set {', '.join(unset)} for your cluster "
        "(still the EDIT_ placeholders; see README, Running on SLURM)"
    )


SHEET = _load_settings()


def _leech_metadata(path):
    """trna.bundle's leech metadata, or None when it is not a leech model: read from the
    bundle, never configured. A bundle that does not exist yet is the demo's, which a demo
    rule trains as a kennel bundle.
    """
    if not Path(path).exists():
        return None
    from kennel.models.leech_files import leech_metadata

    return leech_metadata(path)


LEECH_METADATA = _leech_metadata(config["trna"]["bundle"])
LEECH = LEECH_METADATA is not None
# whether classify runs a whole pairwise bundle, the one model --aggregation applies to: read
# from the bundle's metadata, so the option reruns nothing for any other model
LEECH_VOTES = (
    LEECH
    and not config["trna"]["leech"]["pair"]
    and LEECH_METADATA.get("comparison_type") == "pairwise"
)
if LEECH and not LEECH_VOTES and config["trna"]["leech"]["aggregation"] != "naive":
    logger.warning(
        f"warning: trna.leech.aggregation {config['trna']['leech']['aggregation']} is ignored: "
        "it applies to a whole pairwise bundle only, as in leech predict"
    )


def _check_tag_options():
    """Refuse the tag options this leech model cannot take before any job runs: the tag
    jobs, which apply them, come after the GPU jobs."""
    from kennel.errors import KennelError
    from kennel.models.leech import load_leech_model
    from kennel.trna.leech_classify import leech_tag_options
    from kennel.trna.model_job import ClassifySettings

    leech = config["trna"]["leech"]
    bundle = config["trna"]["bundle"]
    settings = ClassifySettings(abstain_on_junction_indel=True, pair=leech["pair"])
    try:
        leech_tag_options(
            load_leech_model(bundle, pair=leech["pair"]), settings, bundle
        )
    except KennelError as error:
        _stop(f"config: trna.leech.abstain_on_junction_indel: {error}")


if LEECH and config["trna"]["leech"]["abstain_on_junction_indel"]:
    _check_tag_options()


def _not_a_table_model():
    """Why leech predict would write no table (-o calls.tsv) for this leech model, or None: it
    writes one for a multiclass bundle run whole (--bundle --all) only."""
    kind = LEECH_METADATA.get("comparison_type")
    if config["trna"]["leech"]["pair"]:
        return "run as one pair (trna.leech.pair)"
    if kind is None:
        return (
            "a checkpoint directory (leech writes the table with --bundle --all only)"
        )
    if kind != "multiclass":
        return f"a {kind} bundle"
    if int(LEECH_METADATA.get("num_classes") or 2) < 2:
        return "a one-output (binary) model"
    return None


# leech predict's table per sample, and the copied tags its rows hold (passed to classify only
# where a table can be written, so that they rerun nothing else)
NOT_A_TABLE_MODEL = _not_a_table_model() if LEECH else "not a leech model"
LEECH_TABLE = config["trna"]["leech"]["tsv"] and NOT_A_TABLE_MODEL is None
if LEECH and config["trna"]["leech"]["tsv"] and NOT_A_TABLE_MODEL:
    _stop(
        "trna.leech.tsv: leech predict writes its table for multiclass bundles only; "
        f"{config['trna']['bundle']} is {NOT_A_TABLE_MODEL} (set trna.leech.tsv: false)"
    )
for _key in ("tsv", "copy_tags"):
    if config["trna"]["leech"][_key] and NOT_A_TABLE_MODEL:
        logger.warning(
            f"warning: trna.leech.{_key} is ignored: leech predict's table is written for "
            f"multiclass leech bundles; {config['trna']['bundle']} is {NOT_A_TABLE_MODEL}"
        )
UNSET_CLUSTER_RESOURCES = (
    _unset_cluster_resources() if workflow.is_main_process else None
)
if UNSET_CLUSTER_RESOURCES:
    # the plan may be looked at before the profile is edited: a dry run only warns ...
    logger.warning(f"warning: {UNSET_CLUSTER_RESOURCES}")


onstart:
    # ... a real run stops here, before any job is submitted: with the placeholders every
    # sbatch would fail on a partition or account that does not exist
    if UNSET_CLUSTER_RESOURCES:
        _stop(UNSET_CLUSTER_RESOURCES)


TRNA_SAMPLES = {row["id"]: row for row in SHEET if row["arm"] == "trna"}
SNP_JOBS = {row["id"]: row for row in SHEET if row["arm"] == "snp"}
DEMO_DIR = config["demo"]["dir"]
SHARDS = [f"{index:03d}" for index in range(config["trna"]["shards"])]


def snp_models(job):
    """A job's model(s): several, comma-separated, are replicates whose scores are averaged."""
    return [path.strip() for path in SNP_JOBS[job]["model"].split(",") if path.strip()]


def snp_params(job):
    """A job's baskerville params file, for Keras .h5 models (none for other models)."""
    return [SNP_JOBS[job]["params"]] if "params" in SNP_JOBS[job] else []


def snp_params_option(wildcards, input):
    return f"--params {shlex.quote(str(input.params))}" if input.params else ""


def _pod5_entries(row):
    """The sheet's POD5 cell: files or directories of them (a MinKNOW run's pod5/),
    comma-separated."""
    return [path.strip() for path in row["pod5"].split(",") if path.strip()]


@functools.cache
def pod5_paths(sample):
    """A sample's POD5 files, every one an input, so a file added reruns the sample."""
    from kennel.io.pod5 import pod5_files

    try:
        return [str(path) for path in pod5_files(_pod5_entries(TRNA_SAMPLES[sample]))]
    except KennelError as error:
        _stop(f"{config['samples']}: sample {sample}: {error}")


def pod5_option(wildcards):
    """The sheet's entries, not the files found below them: a run directory holds thousands
    of POD5 files, and their paths on one command line pass the kernel's ARG_MAX (~25k
    files); `kennel shard` expands the directories as pod5_paths does."""
    return shlex.join(_pod5_entries(TRNA_SAMPLES[wildcards.sample]))


def pod5_count(wildcards):
    """How many POD5 files the plan takes as the job's input: `kennel shard`, handed the
    directories, refuses another count (files added to a run still being written)."""
    return len(pod5_paths(wildcards.sample))


if workflow.is_main_process:
    # every sample's, so a directory without POD5 files stops the run before any job; a
    # cluster job's own parse walks only its sample's run directories, when its input is asked
    for _sample in TRNA_SAMPLES:
        pod5_paths(_sample)


def shard_mem_mb(wildcards, input):
    """The shard job holds per read of the sample ~90 bytes (read ids and sizes as arrays) and,
    while writing a shard, ~600 more per read of that shard (escapepod's writer): 318 bytes a
    read in all with two shards (bench/bench_shard.py). A POD5 holds ~4.4 kB a read, so per MB
    of input ~2% and ~14% over the shard count; asked with a third more, never below 4 GB.
    """
    return max(4000, int(1000 + input.size_mb * (0.03 + 0.18 / len(SHARDS))))


def _needs_sorting(path):
    """Whether a sample's BAM is in read order (dorado writes aligned BAMs so), read from its
    header; a BAM another rule has yet to write is taken as sorted."""
    if not Path(path).is_file():
        return False
    from kennel.io.bam import is_coordinate_sorted

    return not is_coordinate_sorted(path)


UNSORTED_BAMS = {
    sample for sample, row in TRNA_SAMPLES.items() if _needs_sorting(row["bam"])
}


def sample_bam(wildcards):
    """The BAM the shard step reads: the sheet's, or its coordinate-sorted copy."""
    if wildcards.sample in UNSORTED_BAMS:
        return f"results/trna/{wildcards.sample}/sorted.bam"
    return TRNA_SAMPLES[wildcards.sample]["bam"]


def feature_spec_options(wildcards):
    """The feature spec as `kennel extract`/`classify` options, each value shell-quoted."""
    spec = config["trna"]["features"]
    options = [
        ("--upstream", spec["upstream"]),
        ("--downstream", spec["downstream"]),
        ("--chunk-length", spec["chunk_length"]),
        ("--justify", spec["justify"]),
        ("--motif", spec["motif"]),
        ("--motif-anchor", spec["motif_anchor"]),
        ("--refine", spec["refine"]),
    ]
    for name in ("dwell_weight", "dwell_target"):
        if spec[name] is not None:
            options.append((f"--{name.replace('_', '-')}", spec[name]))
    return " ".join(f"{flag} {shlex.quote(str(value))}" for flag, value in options)


def shard_selection(wildcards):
    """`kennel shard` options: a leech bundle's reads are the records leech predict scores."""
    if not LEECH:
        return ""
    return (
        f"--bundle {shlex.quote(config['trna']['bundle'])} "
        f"--min-mapq {config['trna']['leech']['min_mapq']}"
    )


def extract_model_inputs(wildcards):
    """A leech bundle defines its own inputs, so its extraction reads the bundle."""
    return {"bundle": config["trna"]["bundle"]} if LEECH else {}


def sample_input_options(wildcards):
    """What defines the model inputs extracted from a sample's reads: a leech bundle's own
    config, read from the bundle (`--bundle`, an input of the job), or kennel's feature spec.
    A leech bundle leaves trna.features unused, so a change there must rerun nothing.
    """
    if LEECH:
        # joined without empty parts: one more space in params would rerun every job
        bundle = f"--bundle {shlex.quote(config['trna']['bundle'])}"
        return " ".join(filter(None, [bundle, leech_predict_options()]))
    return feature_spec_options(wildcards)


def leech_predict_options():
    """leech predict's input options that are set (for configs that do not record them)."""
    from kennel.trna.leech_config import LeechPredictOptions

    leech = config["trna"]["leech"]
    options = [
        f"--leech-{name.replace('_', '-')} {shlex.quote(str(leech[name]))}"
        for name in LeechPredictOptions.CONFIG_KEYS
        if leech[name] is not None
    ]
    if leech["backend"] != "auto":
        options.append(f"--leech-backend {leech['backend']}")
    if not leech["leech_core"]:
        options.append("--leech-without-core")
    return " ".join(options)


def classify_inputs(wildcards):
    """Decoupled: the shard's features file. Fused: what extraction needs, in the GPU job."""
    if config["trna"]["fused"]:
        return {
            "pod5": f"results/trna/{wildcards.sample}/shards/{wildcards.shard}.pod5",
            "reference": config["trna"]["reference"],
            "kmer_table": config["trna"]["kmer_table"],
        }
    return {
        "features": f"results/trna/{wildcards.sample}/features/{wildcards.shard}.features.h5"
    }


def classify_source_options(wildcards, input):
    """`kennel classify` options naming where the features come from (quoted)."""
    if config["trna"]["fused"]:
        return (
            f"--pod5 {shlex.quote(input.pod5)} --reference {shlex.quote(input.reference)} "
            f"--kmer-table {shlex.quote(input.kmer_table)} "
            f"{'' if LEECH else feature_spec_options(wildcards)}"
        )
    return f"--features {shlex.quote(input.features)}"


def speed_options(settings):
    """A GPU job's settings that change its speed, never its output, as options (quoted).

    The rules pass them as a resource, not in params: Snakemake reruns a job whose params
    change, and a new batch size or device must not recompute finished shards and slices.
    """
    options = [
        f"--batch-size {settings['batch_size']}",
        f"--device {shlex.quote(settings['device'])}",
        f"--compile {shlex.quote(settings['compile'])}",
        f"--compile-threshold {settings['compile_threshold']}",
    ]
    if settings["inductor_cache"]:
        options.append(f"--inductor-cache {shlex.quote(settings['inductor_cache'])}")
    # classify's only: score-snps has no writer queue to bound
    if "in_flight" in settings:
        options.append(f"--in-flight {settings['in_flight']}")
    return " ".join(options)


CLASSIFY_SPEED = speed_options(config["trna"]["classify"])
SCORE_SPEED = speed_options(config["snp"]["score"])


def pair_option():
    """`--pair P` where a leech pairwise bundle runs as one pair (quoted), else nothing."""
    pair = config["trna"]["leech"]["pair"] if LEECH else None
    return f"--pair {shlex.quote(pair)}" if pair else ""


def threshold_options():
    """min_confidence and min_margin, as `kennel tag`/`kennel trna-report` options."""
    settings = config["trna"]["classify"]
    return (
        f"--min-confidence {settings['min_confidence']} "
        f"--min-margin {settings['min_margin']}"
    )


def classify_options(wildcards):
    """The classify settings that shape the model's outputs, as `kennel classify` options
    (quoted)."""
    if not LEECH:
        return ""
    options = [pair_option()]
    # decoupled, the features file must hold these inputs; fused, classify extracts them
    options.append(leech_predict_options())
    return " ".join(filter(None, options))


def report_options(wildcards):
    """The thresholds the report draws, and a leech model, for it to name a binary model's
    two classes (quoted). One string whose value is unchanged for other models, so that
    adding the model reran no finished report."""
    bundle = f"--bundle {shlex.quote(str(config['trna']['bundle']))}" if LEECH else ""
    return " ".join(filter(None, [threshold_options(), bundle, pair_option()]))


def tag_options(wildcards):
    """The settings that shape the tags from the model's outputs, as `kennel tag` options
    (quoted): changing them reruns tagging, not the GPU job."""
    settings = config["trna"]["classify"]
    options = [threshold_options()]
    if settings["raw_tags"]:
        options.append("--raw-tags")
    leech = config["trna"]["leech"]
    if LEECH and leech["abstain_on_junction_indel"]:
        options.append("--abstain-on-junction-indel")
    if LEECH_VOTES and leech["aggregation"] != "naive":
        options.append(f"--aggregation {leech['aggregation']}")
    if NOT_A_TABLE_MODEL is None and leech["copy_tags"]:
        options.append(f"--copy-tags {shlex.quote(','.join(leech['copy_tags']))}")
    return " ".join(options)


SNP_SLICES = [f"{index:03d}" for index in range(config["snp"]["slices"])]


def snp_clustering_options(wildcards):
    """What decides cluster boundaries, shared by slice-vcf and score-snps."""
    settings = config["snp"]["score"]
    # alts too: a record whose only scored ALT is its first ('*,G' has none with alts first)
    # places a variant or not, which moves the clusters around it
    return (
        f"--seq-len {settings['seq_len']} --cluster-pct {settings['cluster_pct']} "
        f"--alts {shlex.quote(settings['alts'])}"
    )


def snp_score_options(wildcards):
    """The scoring settings that shape the scores, as `kennel score-snps` options (quoted)."""
    settings = config["snp"]["score"]
    shifts = ",".join(str(shift) for shift in settings["shifts"])
    options = [
        snp_clustering_options(wildcards),
        "--rc" if settings["rc"] else "--no-rc",
        f"--shifts={shlex.quote(shifts)}",
        f"--stats {shlex.quote(','.join(settings['stats']))}",
        "--untransform" if settings["untransform"] else "--no-untransform",
        "--unscale" if settings["unscale"] else "--no-unscale",
        "--untransform-old" if settings["untransform_old"] else "--no-untransform-old",
        "--indel-stitch" if settings["indel_stitch"] else "--no-indel-stitch",
        f"--ref-mismatch {shlex.quote(settings['ref_mismatch'])}",
        "--per-model" if settings["per_model"] else "--no-per-model",
        f"--mix-dtype {shlex.quote(settings['mix_dtype'])}",
    ]
    return " ".join(options)


def sweep_leftover_temporaries():
    """Remove temporaries of jobs killed in an earlier run.

    Only in the main process of a real run, and only while no Snakemake run holds this
    directory's lock (a killed run's stale lock must be released with --unlock first), so no
    job can be writing one of them.
    """
    locks = Path(".snakemake/locks")
    if (
        not workflow.is_main_process
        or workflow.dryrun
        or (locks.is_dir() and any(locks.iterdir()))
    ):
        return
    for path in sweep_stale_temporaries("results", DEMO_DIR):
        logger.info(f"removed the leftover of a killed job: {path}")


sweep_leftover_temporaries()


def get_final_output():
    """Everything `snakemake` with no target builds: each sample's and job's final results."""
    outputs = []
    for sample in TRNA_SAMPLES:
        outputs += [
            f"results/trna/{sample}/{sample}.classified.bam",
            f"results/trna/{sample}/summary/counts.tsv",
        ]
        if LEECH_TABLE:
            outputs.append(f"results/trna/{sample}/{sample}.leech.tsv.gz")
    if TRNA_SAMPLES:
        outputs += [
            "results/trna/classes_by_sample.tsv",
            "results/trna/plots/class_composition.png",
        ]
    for job in SNP_JOBS:
        outputs += [
            f"results/snp/{job}/scores.h5",
            f"results/snp/{job}/report/score_distributions.png",
            f"results/snp/{job}/report/top_variants.html",
        ]
    return outputs
