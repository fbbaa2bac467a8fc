"""Benchmarks for credax: speed against peer implementations (``python -m benchmarks.speed``)."""
