"""python -m tgweb: see tgweb.cli."""

import sys

from .cli import main

sys.exit(main())
