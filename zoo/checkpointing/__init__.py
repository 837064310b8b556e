"""Checkpoint files: reading them with `weights_only=True` and checking them before a run resumes (`reading`,
`choosing`), atomic writes (`atomic_io`) and the weights checksum recorded at save, verified at load
(`weights_checksum`)."""
