"""The harnesses that run the docs' client examples (tests/e2e/test_readme.py)."""
