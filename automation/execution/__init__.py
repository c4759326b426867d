"""Applying stacks: the session every road takes, the orchestrator, the executors' runners, programs."""
