"""``python -m agentq.cli``: the same as the ``agentq`` console script."""

import sys

from agentq.cli import main

sys.exit(main())
