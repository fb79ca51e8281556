"""The ``servesim`` command line: one home above the reference and the conformance suite.

The reference simulator (``servesim``) knows nothing of the suite or of this package; the
conformance suite (``servesim_conformance``) builds on the reference. Only this package sees
both, so every arrow in the tree points down: ``servesim_cli`` -> ``servesim_conformance`` ->
``servesim``.
"""
