"""``python -m agentq.reference``: write (``--check``: compare) docs/reference/."""

import sys

from agentq.reference import main

sys.exit(main())
