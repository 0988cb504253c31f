"""``python -m service.client``: the command line of the bundled client."""

import sys

from .cli import main

sys.exit(main())
