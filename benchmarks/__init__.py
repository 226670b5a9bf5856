"""hybrid's benchmarks: ``python -m benchmarks`` runs every one this machine can run."""
