"""The checks room: the offline preview (Pulumi's mock runtime and its fake outputs), the deployability check
over what it records, and the pull-request review that reports both. It sits above execution (it runs the stacks'
programs, automation/execution/programs.py) and below the roads that call it (the CLI, the portal)."""
