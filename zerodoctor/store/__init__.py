"""Store: events, files with offsets, quarantined lines and findings, behind SQLAlchemy."""
