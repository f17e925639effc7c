"""The names of the variant-effect stats, in a module without torch, so the command line can
list them without importing it (the formulas are in :mod:`kennel.snp.stats`)."""

# every stat of hound_snp's compute_scores, in its order
HOUND_STATS = (
    "SUM",
    "logSUM",
    "logSED",
    "sqrtSUM",
    "SAX",
    "D1",
    "logD1",
    "sqrtD1",
    "D2",
    "logD2",
    "sqrtD2",
    "JS",
    "logJS",
    "REF",
    "ALT",
)
STATS = (*HOUND_STATS, "logFC")  # logFC is kennel's own
PROFILE_STATS = ("REF", "ALT")  # (shifts, bins, tracks) per variant instead of (tracks,)
DEFAULT_STATS = ("SUM", "logSUM", "D1", "D2", "logD1", "logD2")
