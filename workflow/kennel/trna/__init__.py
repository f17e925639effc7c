"""The aa-tRNA arm: shard, extract, classify, merge."""
