"""The leaderboard: a fixed, versioned evaluation protocol and its results.

``specs`` reads specs and result files (no torch), ``runner`` plays a spec with a
policy, ``policies`` resolves ``--policy`` names, ``render`` writes the board and
``cli`` is the ``gigpo-gym leaderboard`` command.
"""
