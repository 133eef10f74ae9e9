"""Messages: what the libraries print, as data — the ground floor that sources, the probe and signals share.

Nothing here reads a file or an event: each module is a vocabulary of one message family (its
patterns, the names it gives), written from the libraries' own format strings, so the probe can
name a crash without loading the text-log machinery and a signal can name it without a parser.
"""
