"""Report: findings → text for people (rich), JSON for tools, Markdown for issues and PRs."""
