"""real package."""
