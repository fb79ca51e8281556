"""``python -m servesim_dynamo``."""

import sys

from servesim_dynamo.cli import main

sys.exit(main())
