"""Command-line programs (thin absl main() functions over the library)."""
