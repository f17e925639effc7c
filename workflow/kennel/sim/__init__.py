"""Simulators that write real-format inputs for both arms."""
