"""Tools that make documents but are not the simulator: trace importers (``importers``,
``weka_sessions``) and the calibration of measured timing profiles (the ``calibrate`` package,
one module per job of R44).

They sit above the contract, the engine and the report and may use any of them; nothing of the
simulator imports a tool (``tests/test_layers.py``).
"""
