"""Teaching labs: small models trained live, outside the PICASO engine (the engine never imports
this package)."""
