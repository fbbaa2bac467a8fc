"""Slow, obviously correct NumPy loop references, one module per family.

Written independently of credax (plain Python loops over rows, groups and turns, float64), so a
shared bug cannot make both agree. Nothing here imports credax.
"""
