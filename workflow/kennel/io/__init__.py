"""Readers and writers for the formats kennel touches (POD5, BAM, FASTA, VCF, HDF5)."""
