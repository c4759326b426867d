"""Entry point of the platform Pulumi program (Pulumi.yaml: main: infra/)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from infra.laptop import main  # noqa: E402

main()
