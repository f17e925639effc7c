"""Command modules: argument wiring for each ``kennel`` verb, nothing more."""
