"""What is applied: the record every entry point reads, and where each executor keeps it."""
