"""``python -m service.client``: the command line of the bundled client."""

import sys

from . import main

sys.exit(main())
