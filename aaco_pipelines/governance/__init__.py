"""Drift governance: is the current session of a model a regression, an improvement, or noise?

Each metric of a model is a series with one point per measured session, oldest first; the last
point is the current session. A verdict needs both statistical evidence (robust z, EWMA, CUSUM)
and a practically significant effect with a bootstrap CI that excludes zero, and it carries every
parameter it used so a stored verdict can be reproduced.

Readers of the TraceLake: they may import the foundation, storage and the producers, never a
stage or a surface.
"""
