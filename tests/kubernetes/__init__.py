"""Tests of the Kubernetes pods, volumes, claims and backends, against an API server double."""
