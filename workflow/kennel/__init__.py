"""kennel: keep GPU genomics models fed at cluster scale."""

__version__ = "0.1.0"
