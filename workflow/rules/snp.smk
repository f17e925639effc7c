# The SNP arm: slice the VCF → score each slice (GPU) → merge, with a report.


rule slice_vcf:
    input:
        vcf=lambda wildcards: SNP_JOBS[wildcards.job]["vcf"],
        model=lambda wildcards: snp_models(wildcards.job),
        params=lambda wildcards: snp_params(wildcards.job),
    output:
        expand("results/snp/{{job}}/slices/{slice}.vcf.gz", slice=SNP_SLICES),
    log:
        "logs/slice_vcf/{job}.log",
    benchmark:
        "benchmarks/slice_vcf/{job}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        clustering=snp_clustering_options,
        keras=snp_params_option,
        # not read by the command (the outputs say how many slices), but a change must rerun
        # it: slice 000 of a 2-slice run holds half the variants, and merging the old slices
        # that a lower count still names would silently drop the rest
        slices=len(SNP_SLICES),
    shell:
        "kennel slice-vcf --vcf {input.vcf:q} --model {input.model:q} {params.keras} "
        "{params.clustering} "
        "--out {output:q} > {log:q} 2>&1"


rule score_snps:
    input:
        vcf="results/snp/{job}/slices/{slice}.vcf.gz",
        genome=lambda wildcards: SNP_JOBS[wildcards.job]["genome"],
        genome_index=lambda wildcards: SNP_JOBS[wildcards.job]["genome"] + ".fai",
        model=lambda wildcards: snp_models(wildcards.job),
        params=lambda wildcards: snp_params(wildcards.job),
        targets=lambda wildcards: SNP_JOBS[wildcards.job]["targets"],
    output:
        "results/snp/{job}/slices/{slice}.scores.h5",
    log:
        "logs/score_snps/{job}.{slice}.log",
    benchmark:
        "benchmarks/score_snps/{job}.{slice}.tsv"
    wildcard_constraints:
        slice=r"\d+",
    conda:
        "../../envs/kennel.yaml"
    threads: config["snp"]["score"]["threads"]
    resources:
        gpu=1,
        mem_mb=config["snp"]["score"]["mem_mb"],
        speed=SCORE_SPEED,
    params:
        settings=snp_score_options,
        keras=snp_params_option,
    shell:
        "kennel score-snps --vcf {input.vcf:q} --genome {input.genome:q} "
        "--model {input.model:q} {params.keras} --targets {input.targets:q} --out {output:q} "
        "--threads {threads} {params.settings} {resources.speed} > {log:q} 2>&1"


rule merge_scores:
    input:
        expand("results/snp/{{job}}/slices/{slice}.scores.h5", slice=SNP_SLICES),
    output:
        scores="results/snp/{job}/scores.h5",
        plot=report(
            "results/snp/{job}/report/score_distributions.png",
            caption="../report/snp_score_distributions.rst",
            category="SNP",
            subcategory="{job}",
        ),
        table=report(
            "results/snp/{job}/report/top_variants.html",
            caption="../report/snp_top_variants.rst",
            category="SNP",
            subcategory="{job}",
        ),
    log:
        "logs/merge_scores/{job}.log",
    benchmark:
        "benchmarks/merge_scores/{job}.tsv"
    conda:
        "../../envs/kennel.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        top=config["snp"]["top_variants"],
    shell:
        "kennel merge-scores {input:q} --out {output.scores:q} --plot {output.plot:q} "
        "--table {output.table:q} --top {params.top} > {log:q} 2>&1"
