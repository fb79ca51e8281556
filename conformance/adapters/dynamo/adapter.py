"""Run the Dynamo adapter from a checkout: ``python conformance/adapters/dynamo/adapter.py ...``.

Needs the tox ``dynamo`` environment (servesim plus ai-dynamo 1.6.1); see README.md here.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servesim_dynamo.cli import main

sys.exit(main())
