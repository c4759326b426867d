"""Live capacity: what each cluster's API server says its pools have free (fleet/live_capacity.py), read here."""
