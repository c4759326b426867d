"""The root of every error this project raises on purpose.

Each says, in one line, what is wrong and what to do; the CLI and the portal show that line and never a
traceback. A `ModelplaneError` that escapes to the CLI's last resort is still shown as one line: only other
exceptions are internal errors.
"""

from __future__ import annotations


class ModelplaneError(Exception):
    pass
