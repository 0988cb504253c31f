"""How long the long runs are: CI runs a bounded size, the QA run a larger one (docs/development.md).

``MST_TEST_KILLS``: the SIGKILLs of the restart storms (tests/service/test_restarts.py and
tests/service/test_faults.py): 9 by default, every scenario of the storm three times; the QA run
takes 30 or more. The fuzzers have their own: ``MST_FUZZ_EXAMPLES`` and ``MST_SCHEMATHESIS_EXAMPLES``.
"""

from __future__ import annotations

import os

KILLS = int(os.environ.get("MST_TEST_KILLS", "9"))
