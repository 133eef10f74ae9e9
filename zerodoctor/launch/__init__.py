"""``zerodoctor run -- CMD``: the job launched untouched beside the probe, and what is
known of its ranks once it ended."""
