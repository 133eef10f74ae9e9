"""DeepSpeed as data: its config file format, its defaults and key names, and ZeRO's
model-state memory arithmetic; the ground floor every stage that reads a config or a log shares."""
