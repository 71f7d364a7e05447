"""Teaching labs behind the app's explanatory tabs: small, checkable computations (the SSM primer)
and small models trained live (the COFFEE lab).

Modules here may use the engine (model, scan) and read its internals; the engine never imports
them (picaso_core.engine.scan / model / state / loading stay free of lab, UI and plotting code).
"""
