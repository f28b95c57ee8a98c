"""The contract matrix: every head x every promise (issue 29)."""
