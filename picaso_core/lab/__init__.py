"""Teaching lab: small, checkable computations behind the app's explanatory tabs.

Modules here may use the engine (model, scan) and read its internals; the engine never imports
them (picaso_core.scan / model / state / loading stay free of lab, UI and plotting code).
"""
