"""The harnesses that run the README's client examples (tests/test_readme.py)."""
