"""``python -m agentq.cli``: the same as the ``agentq`` console script."""

import sys

from agentq.cli.main import main

sys.exit(main())
