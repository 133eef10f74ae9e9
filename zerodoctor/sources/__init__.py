"""Sources: files on disk → batches of validated ``Event``s plus the lines kept aside.

``batches.py`` reads a file with the parser of its format, one module per format or message family
beside it; ``plugin.py`` registers them all as the core's own plugin.
"""
