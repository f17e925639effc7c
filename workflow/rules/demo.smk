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
