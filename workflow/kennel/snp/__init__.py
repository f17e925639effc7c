"""The variant-effect arm: slice, score, merge."""
