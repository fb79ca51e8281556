"""``python -m servesim`` is ``servesim``."""

from servesim._cli import main

raise SystemExit(main())
