# The aa-tRNA arm: shard → extract (CPU) → classify (GPU) → merge → summarize.


rule shard:
    input:
        bam=lambda wildcards: TRNA_SAMPLES[wildcards.sample]["bam"],
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
    threads: 1
    resources:
        mem_mb=4000,
    conda:
        "../../envs/kennel.yaml"
    shell:
        "kennel shard --bam {input.bam:q} --pod5 {input.pod5:q} --reference {input.reference:q} "
        "--shard-pod5 {output.pod5:q} --shard-bam {output.bam:q} "
        "--passthrough {output.passthrough:q} --counts {output.counts:q} > {log:q} 2>&1"


rule extract:
    input:
        bam="results/trna/{sample}/shards/{shard}.bam",
        pod5="results/trna/{sample}/shards/{shard}.pod5",
        reference=config["trna"]["reference"],
        kmer_table=config["trna"]["kmer_table"],
    output:
        "results/trna/{sample}/features/{shard}.features.h5",
    params:
        spec=feature_spec_options,
    log:
        "logs/extract/{sample}.{shard}.log",
    benchmark:
        "benchmarks/extract/{sample}.{shard}.tsv"
    threads: config["trna"]["extract"]["threads"]
    resources:
        mem_mb=4000,
    conda:
        "../../envs/kennel.yaml"
    shell:
        "kennel extract --bam {input.bam:q} --pod5 {input.pod5:q} "
        "--reference {input.reference:q} --kmer-table {input.kmer_table:q} "
        "--output {output:q} --threads {threads} {params.spec} > {log:q} 2>&1"
