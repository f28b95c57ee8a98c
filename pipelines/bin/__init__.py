"""Command-line programs for data preparation."""
