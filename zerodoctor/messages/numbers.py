"""Messages, numbers: how the libraries print a number, for every pattern that reads one."""

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"  # a number as C's printf or Python's repr writes it
