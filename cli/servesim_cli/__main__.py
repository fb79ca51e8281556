"""``python -m servesim_cli`` is ``servesim``."""

from servesim_cli.main import main

raise SystemExit(main())
