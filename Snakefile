from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/trna.smk"
include: "workflow/rules/snp.smk"
include: "workflow/rules/demo.smk"  # after trna.smk: it reuses the extract rule


rule all:
    input:
        get_final_output(),
