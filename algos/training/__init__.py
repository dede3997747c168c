"""Training: multi-turn rollout -> advantages -> clipped-surrogate loss -> trainer.

``rollout`` plays grouped envs into rows, ``loss`` is the shared policy loss,
``trainer`` owns the loop (with ``config``, ``checkpoint``, ``metrics``), ``sft`` the
supervised warm start on expert demonstrations.
"""
