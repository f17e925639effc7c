# The aa-tRNA arm: (sort) → shard → extract (CPU) → classify (GPU) → tag (CPU) → merge →
# summarize.


rule sort_bam:
    """Only for a sample whose BAM is in read order, as dorado writes aligned BAMs; the copy is
    temporary: once sharded, the shards hold every record."""
    input:
        lambda wildcards: TRNA_SAMPLES[wildcards.sample]["bam"],
    output:
        temp("results/trna/{sample}/sorted.bam"),
    log:
        "logs/sort_bam/{sample}.log",
    benchmark:
        "benchmarks/sort_bam/{sample}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["sort"]["threads"]
    resources:
        mem_mb=config["trna"]["sort"]["mem_mb"],
    shell:
        "kennel sort-bam --bam {input:q} --output {output:q} --threads {threads} "
        "--mem-mb {resources.mem_mb} > {log:q} 2>&1"


rule shard:
    input:
        bam=sample_bam,
        pod5=lambda wildcards: pod5_paths(wildcards.sample),
        reference=config["trna"]["reference"],
    output:
        pod5=expand("results/trna/{{sample}}/shards/{shard}.pod5", shard=SHARDS),
        bam=expand("results/trna/{{sample}}/shards/{shard}.bam", shard=SHARDS),
        bai=expand("results/trna/{{sample}}/shards/{shard}.bam.bai", shard=SHARDS),
        passthrough="results/trna/{sample}/passthrough.bam",
        passthrough_bai="results/trna/{sample}/passthrough.bam.bai",
        counts="results/trna/{sample}/shard_counts.tsv",
    log:
        "logs/shard/{sample}.log",
    benchmark:
        "benchmarks/shard/{sample}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["shard"]["threads"]
    resources:
        mem_mb=shard_mem_mb,
    params:
        pod5=pod5_option,
        pod5_files=pod5_count,
        selection=shard_selection,
        # not read by the command (the outputs say how many shards), but a change must rerun
        # it: shard 000 of a 3-shard run is not shard 000 of a 1-shard run
        shards=len(SHARDS),
    shell:
        "kennel shard --bam {input.bam:q} --pod5 {params.pod5} --pod5-files {params.pod5_files} "
        "--reference {input.reference:q} "
        "--shard-pod5 {output.pod5:q} --shard-bam {output.bam:q} "
        "--passthrough {output.passthrough:q} --counts {output.counts:q} --threads {threads} "
        "{params.selection} "
        "> {log:q} 2>&1"


rule extract:
    input:
        unpack(extract_model_inputs),
        bam="results/trna/{sample}/shards/{shard}.bam",
        pod5="results/trna/{sample}/shards/{shard}.pod5",
        reference=config["trna"]["reference"],
        kmer_table=config["trna"]["kmer_table"],
    output:
        "results/trna/{sample}/features/{shard}.features.h5",
    log:
        "logs/extract/{sample}.{shard}.log",
    benchmark:
        "benchmarks/extract/{sample}.{shard}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["extract"]["threads"]
    resources:
        mem_mb=4000,
    params:
        inputs=sample_input_options,
    shell:
        "kennel extract --bam {input.bam:q} --pod5 {input.pod5:q} "
        "--reference {input.reference:q} --kmer-table {input.kmer_table:q} "
        "--output {output:q} --threads {threads} {params.inputs} > {log:q} 2>&1"


rule classify:
    input:
        unpack(classify_inputs),
        bam="results/trna/{sample}/shards/{shard}.bam",
        bundle=config["trna"]["bundle"],
    output:
        # the model's outputs, tagged onto the BAM by the tag rule (a CPU job)
        "results/trna/{sample}/scored/{shard}.h5",
    log:
        "logs/classify/{sample}.{shard}.log",
    benchmark:
        "benchmarks/classify/{sample}.{shard}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["classify"]["threads"]
    resources:
        gpu=1,
        mem_mb=config["trna"]["classify"]["mem_mb"],
        speed=CLASSIFY_SPEED,
    params:
        source=classify_source_options,
        settings=classify_options,
    shell:
        "kennel classify --bam {input.bam:q} --bundle {input.bundle:q} {params.source} "
        "--outputs {output:q} --threads {threads} {params.settings} {resources.speed} "
        "> {log:q} 2>&1"


rule tag:
    input:
        bam="results/trna/{sample}/shards/{shard}.bam",
        outputs="results/trna/{sample}/scored/{shard}.h5",
        bundle=config["trna"]["bundle"],
    output:
        bam="results/trna/{sample}/classified/{shard}.bam",
        bai="results/trna/{sample}/classified/{shard}.bam.bai",
        predictions="results/trna/{sample}/classified/{shard}.predictions.tsv",
        stats="results/trna/{sample}/classified/{shard}.stats.json",
    log:
        "logs/tag/{sample}.{shard}.log",
    benchmark:
        "benchmarks/tag/{sample}.{shard}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["merge"]["threads"]
    resources:
        mem_mb=2000,
    params:
        settings=tag_options,
    shell:
        "kennel tag --bam {input.bam:q} --outputs {input.outputs:q} --bundle {input.bundle:q} "
        "--output {output.bam:q} --predictions {output.predictions:q} "
        "--stats {output.stats:q} --threads {threads} {params.settings} > {log:q} 2>&1"


rule merge_bam:
    input:
        shards=expand("results/trna/{{sample}}/classified/{shard}.bam", shard=SHARDS),
        stats=expand(
            "results/trna/{{sample}}/classified/{shard}.stats.json", shard=SHARDS
        ),
        passthrough="results/trna/{sample}/passthrough.bam",
        counts="results/trna/{sample}/shard_counts.tsv",
    output:
        bam="results/trna/{sample}/{sample}.classified.bam",
        bai="results/trna/{sample}/{sample}.classified.bam.bai",
    log:
        "logs/merge_bam/{sample}.log",
    benchmark:
        "benchmarks/merge_bam/{sample}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["merge"]["threads"]
    resources:
        mem_mb=2000,
    shell:
        "kennel merge-bam --shards {input.shards:q} --passthrough {input.passthrough:q} "
        "--counts {input.counts:q} --stats {input.stats:q} --output {output.bam:q} "
        "--threads {threads} > {log:q} 2>&1"


rule leech_table:
    input:
        tables=expand(
            "results/trna/{{sample}}/classified/{shard}.predictions.tsv", shard=SHARDS
        ),
        bam="results/trna/{sample}/{sample}.classified.bam",
    output:
        "results/trna/{sample}/{sample}.leech.tsv.gz",
    log:
        "logs/leech_table/{sample}.log",
    benchmark:
        "benchmarks/leech_table/{sample}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: config["trna"]["merge"]["threads"]
    resources:
        mem_mb=1000,
    params:
        bundle=config["trna"]["bundle"],
    shell:
        "kennel leech-table --tables {input.tables:q} --bam {input.bam:q} "
        "--bundle {params.bundle:q} --threads {threads} --output {output:q} > {log:q} 2>&1"


rule summarize:
    input:
        bam="results/trna/{sample}/{sample}.classified.bam",
        counts="results/trna/{sample}/shard_counts.tsv",
        stats=expand(
            "results/trna/{{sample}}/classified/{shard}.stats.json", shard=SHARDS
        ),
    output:
        counts="results/trna/{sample}/summary/counts.tsv",
        classes="results/trna/{sample}/summary/classes.tsv",
        distributions="results/trna/{sample}/summary/distributions.tsv",
    log:
        "logs/summarize/{sample}.log",
    benchmark:
        "benchmarks/summarize/{sample}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    shell:
        "kennel summarize --sample {wildcards.sample:q} --bam {input.bam:q} "
        "--counts {input.counts:q} --stats {input.stats:q} --counts-out {output.counts:q} "
        "--classes-out {output.classes:q} --distributions-out {output.distributions:q} "
        "> {log:q} 2>&1"


rule trna_report:
    input:
        classes=expand("results/trna/{sample}/summary/classes.tsv", sample=TRNA_SAMPLES),
        distributions=expand(
            "results/trna/{sample}/summary/distributions.tsv", sample=TRNA_SAMPLES
        ),
        counts=expand("results/trna/{sample}/summary/counts.tsv", sample=TRNA_SAMPLES),
    output:
        table="results/trna/classes_by_sample.tsv",
        composition=report(
            "results/trna/plots/class_composition.png",
            caption="../report/trna_composition.rst",
            category="tRNA",
        ),
        fates=report(
            "results/trna/plots/fates.png",
            caption="../report/trna_fates.rst",
            category="tRNA",
        ),
        confidence=report(
            "results/trna/plots/confidence.png",
            caption="../report/trna_confidence.rst",
            category="tRNA",
        ),
        charging=report(
            "results/trna/plots/charging.png",
            caption="../report/trna_charging.rst",
            category="tRNA",
        ),
    log:
        "logs/trna_report/all.log",
    benchmark:
        "benchmarks/trna_report/all.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    params:
        # the thresholds and, for a leech model, the model (its name unchanged: a changed
        # shell command would rerun every finished report)
        thresholds=report_options,
    shell:
        "kennel trna-report --classes {input.classes:q} "
        "--distributions {input.distributions:q} --counts {input.counts:q} "
        "--table {output.table:q} --composition {output.composition:q} "
        "--fates {output.fates:q} --confidence {output.confidence:q} "
        "--charging {output.charging:q} {params.thresholds} > {log:q} 2>&1"
