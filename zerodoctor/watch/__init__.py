"""Watch: run directories on disk → the store, live: tail files exactly once, judge runs as events arrive."""
