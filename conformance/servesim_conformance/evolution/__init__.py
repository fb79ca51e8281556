"""Schema evolution reviews: compatibility verdicts, counterexamples, releases, the review.

The modules, each with one job:

- ``diff``: walk two schemas and classify every change (``model.Change``) by rule;
- ``oracle``: a schema as a reader (R1's integers, the version relabelled, rejections located);
- ``strategies`` and ``search``: generate documents and find a counterexample (Hypothesis);
- ``reduce``: cut a counterexample down to something a reviewer reads;
- ``compare``: the diff and the searches together, a verdict per direction;
- ``roles``: which direction matters for which document;
- ``catalog``: the schemas of a revision, current and released, and the release checksums;
- ``policy`` and ``review``: the versioning policy applied to a whole revision;
- ``render`` and ``markdown``: text, JSON and Markdown;
- ``cli``: ``servesim schema diff|review`` and ``servesim migrate``.

Nothing is imported here, so that ``servesim``'s command line can build its parser without
loading the engine or Hypothesis.
"""
