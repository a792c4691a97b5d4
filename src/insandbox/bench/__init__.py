"""Benchmarks: tasks, data, prompts, scorers, the concurrent runner and the report."""
