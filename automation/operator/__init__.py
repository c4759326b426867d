"""The operator executor: PKO Stack and Program objects, their settings, the Git source."""
