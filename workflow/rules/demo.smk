# The embedded demo: simulated inputs for both arms, written under demo.dir.


rule simulate_trna_demo:
    output:
        reference=f"{DEMO_DIR}/trna/reference.fa",
        reference_index=f"{DEMO_DIR}/trna/reference.fa.fai",
        kmer_table=f"{DEMO_DIR}/trna/kmer_levels.tsv",
        pod5=expand(
            f"{DEMO_DIR}/trna/{{sample}}.pod5", sample=config["demo"]["trna_samples"]
        ),
        bam=expand(
            f"{DEMO_DIR}/trna/{{sample}}.bam", sample=config["demo"]["trna_samples"]
        ),
        bai=expand(
            f"{DEMO_DIR}/trna/{{sample}}.bam.bai",
            sample=config["demo"]["trna_samples"],
        ),
        truth=expand(
            f"{DEMO_DIR}/trna/{{sample}}.truth.tsv",
            sample=config["demo"]["trna_samples"],
        ),
    log:
        "logs/simulate_trna_demo/demo.log",
    benchmark:
        "benchmarks/simulate_trna_demo/demo.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    params:
        out_dir=lambda wildcards, output: Path(output.reference).parent,
        samples=",".join(config["demo"]["trna_samples"]),
        reads=config["demo"]["trna_reads"],
        seed=config["demo"]["seed"],
    shell:
        "kennel simulate trna --out-dir {params.out_dir:q} --samples {params.samples:q} "
        "--reads {params.reads} --seed {params.seed} > {log:q} 2>&1"


rule simulate_snp_demo:
    output:
        genome=f"{DEMO_DIR}/snp/genome.fa",
        genome_index=f"{DEMO_DIR}/snp/genome.fa.fai",
        vcf=f"{DEMO_DIR}/snp/variants.vcf.gz",
        vcf_index=f"{DEMO_DIR}/snp/variants.vcf.gz.tbi",
        targets=f"{DEMO_DIR}/snp/targets.tsv",
        model=f"{DEMO_DIR}/snp/model.pt",
        truth=f"{DEMO_DIR}/snp/truth.tsv",
    log:
        "logs/simulate_snp_demo/demo.log",
    benchmark:
        "benchmarks/simulate_snp_demo/demo.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    params:
        out_dir=lambda wildcards, output: Path(output.genome).parent,
        variants=config["demo"]["snp_variants"],
        seed=config["demo"]["seed"],
    shell:
        "kennel simulate snp --out-dir {params.out_dir:q} --variants {params.variants} "
        "--seed {params.seed} > {log:q} 2>&1"


# The demo's classifier is trained here, on its own simulated reads (another seed, the same
# reference, k-mer table and class chemistry), so a fresh clone needs no model download.
rule simulate_trna_training:
    input:
        reference=f"{DEMO_DIR}/trna/reference.fa",
        kmer_table=f"{DEMO_DIR}/trna/kmer_levels.tsv",
    output:
        pod5=f"{DEMO_DIR}/trna_train/train.pod5",
        bam=f"{DEMO_DIR}/trna_train/train.bam",
        bai=f"{DEMO_DIR}/trna_train/train.bam.bai",
        truth=f"{DEMO_DIR}/trna_train/train.truth.tsv",
        reference=f"{DEMO_DIR}/trna_train/reference.fa",
        reference_index=f"{DEMO_DIR}/trna_train/reference.fa.fai",
        kmer_table=f"{DEMO_DIR}/trna_train/kmer_levels.tsv",
    log:
        "logs/simulate_trna_training/demo.log",
    benchmark:
        "benchmarks/simulate_trna_training/demo.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    params:
        out_dir=lambda wildcards, output: Path(output.bam).parent,
        reads=config["demo"]["trna_train_reads"],
        seed=config["demo"]["seed"] + 1000,
    shell:
        "kennel simulate trna --out-dir {params.out_dir:q} --samples train "
        "--reads {params.reads} --seed {params.seed} --reference {input.reference:q} "
        "--kmer-table {input.kmer_table:q} > {log:q} 2>&1"


# the training reads were simulated on the demo's own reference and k-mer table, whatever
# trna.reference / trna.kmer_table point at
use rule extract as extract_trna_training with:
    input:
        bam=f"{DEMO_DIR}/trna_train/train.bam",
        pod5=f"{DEMO_DIR}/trna_train/train.pod5",
        reference=f"{DEMO_DIR}/trna_train/reference.fa",
        kmer_table=f"{DEMO_DIR}/trna_train/kmer_levels.tsv",
    output:
        f"{DEMO_DIR}/trna_train/train.features.h5",
    log:
        "logs/extract_trna_training/demo.log",
    benchmark:
        "benchmarks/extract_trna_training/demo.tsv"
    params:
        inputs=feature_spec_options,  # the demo trains a kennel bundle, whatever trna.bundle is


rule train_trna_demo:
    input:
        features=f"{DEMO_DIR}/trna_train/train.features.h5",
        truth=f"{DEMO_DIR}/trna_train/train.truth.tsv",
    output:
        f"{DEMO_DIR}/trna/bundle.pt",
    log:
        "logs/train_trna_demo/demo.log",
    benchmark:
        "benchmarks/train_trna_demo/demo.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    params:
        epochs=config["demo"]["trna_train_epochs"],
        seed=config["demo"]["seed"],
    shell:
        "kennel train --features {input.features:q} --truth {input.truth:q} "
        "--output {output:q} --epochs {params.epochs} --seed {params.seed} > {log:q} 2>&1"
