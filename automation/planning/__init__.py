"""What the fleet should be: stack specs and their fingerprints, comparisons, the deployability check."""
