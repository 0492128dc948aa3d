"""Tests of the repository as a whole: the import-graph layers, the assert lint, README benchmark claims, the strict listener, the turn-taking set, GPU stacks resolving."""
