"""The field's exchange formats: ATIF trajectories out of run folders, benchmarks and RL rollouts, and back
in as run folders (atif.py; the files: atif_files.py)."""
