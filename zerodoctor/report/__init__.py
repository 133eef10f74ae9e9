"""Report: findings → text (rich), JSON, Markdown, a self-contained HTML page with plots, live pages, run vs run."""
