"""The one road every entry point takes to the stacks (the CLI's apply, the portal's worker): open the executor
(`executor.py`, local or operator) and run the preflight (`preflight.py`) before anything applies. Above the rooms
it joins: execution, checks and the operator."""
