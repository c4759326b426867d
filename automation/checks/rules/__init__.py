"""The deployability check's rules, one module per idea; automation/checks/deployability.py lists them (RULES).
Each rule is a function from the graph (automation/checks/graph.py) to the violations it finds."""
