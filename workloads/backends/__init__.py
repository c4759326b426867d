"""The serving backends a replica's engines run on (fleet/backends.py decides which): one module each, behind the
`Backend` protocol and its registry (workloads/backends/registry.py)."""
