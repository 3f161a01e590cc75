"""`python -m services.cli`: the `queueflow` command."""

import sys

from services.cli import main

sys.exit(main())
