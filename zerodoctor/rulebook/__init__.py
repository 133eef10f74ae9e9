"""Rules: YAML rule files → checked rules → findings for one run's signals."""
