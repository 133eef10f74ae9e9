"""Fixes: a finding's config patch → the patched DeepSpeed config and a diff people can read."""
