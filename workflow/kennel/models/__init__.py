"""Model architectures and the bundle format that carries them."""
