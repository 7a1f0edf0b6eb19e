"""The harnesses that run the README's client examples (tests/e2e/test_readme.py)."""
