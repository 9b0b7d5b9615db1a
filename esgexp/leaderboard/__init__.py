"""The leaderboard: finished runs read back (store.py), ranked per dataset and task (table.py, significance.py),
written as CSV, Markdown and one HTML page (board.py, page.py, figures.py); the command is esgexp/cli/leaderboard.py."""
