"""The follower: ships each followed run's journal to MLflow from its cursor (``follower``,
``shipping``), in sends with retries (``delivery``), asking what the store holds (``held``), at a
cadence that follows the server (``cadence``) and the lowest CPU priority (``priority``);
``series``: which epochs make a run's MLflow series.
"""
