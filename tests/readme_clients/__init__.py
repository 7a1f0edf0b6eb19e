"""The harnesses that run the docs' client examples (tests/test_readme.py)."""
