"""`python -m gpuplan ...`: the `gpuplan` command (gpuplan.entry)."""

import sys

from gpuplan.entry import main

sys.exit(main())
