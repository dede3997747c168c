"""One process of a multi-process test run (started by tests/test_distributed.py through torchrun).

``python dist_worker.py SCENARIO OUT_DIR OVERRIDES_JSON``:

- ``update``: the update of a given rollout (``OUT_DIR/rollout.pkl``, collected by one process),
  each process on its own groups' rows; rank 0 saves the full weights after it
  (``weights.pt``) and every process its episodes of a fresh rollout (``episodes-R.json``);
- ``train``: ``run_training``;
- ``die``: ``run_training`` where rank 1 is killed (SIGKILL) while playing iteration 2;
- ``fail``: ``run_training`` where rank 1 raises while playing iteration 2; it records
  whether its process group was still up when ``run_training`` re-raised
  (``group-after-failure.json``);
- ``resume``: resume the run's latest checkpoint; rank 0 saves the full weights and
  optimiser state it holds then (``resumed.pt``).
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import helpers_fake  # noqa: E402,F401  (registers the corridor env)
import torch  # noqa: E402

from gigpo_gym.algos.training import trainer as trainer_module  # noqa: E402
from gigpo_gym.algos.training.config import load_config  # noqa: E402
from gigpo_gym.algos.training.rollout import Rollout, collect  # noqa: E402
from gigpo_gym.core.env import derive_seed  # noqa: E402


def own_rows(rollout: Rollout, groups: set[int]) -> Rollout:
    """The rows and episodes of ``groups`` (as the process owning them would have collected them)."""
    keep = [i for i, g in enumerate(rollout.group_ids) if g in groups]
    out = Rollout()
    for name in Rollout.ROW_COLUMNS + Rollout.TOKEN_COLUMNS:
        column = getattr(rollout, name)
        setattr(out, name, [column[i] for i in keep])
    out.episodes = [e for e in rollout.episodes if e.group_id in groups]
    return out


def main() -> None:
    scenario, out, overrides = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    cfg = load_config(None, overrides)
    rank = int(os.environ["RANK"])
    if scenario == "update":
        trainer = trainer_module.Trainer(cfg)
        trainer.prepare()
        trainer.freeze_reference()
        fresh = collect(trainer.actor, trainer.envs, trainer.sampling(1), seed=derive_seed(cfg.seed, 1),
                        shaping=trainer.shaping)
        episodes = [[e.group_id, e.traj_id, e.task_id] for e in fresh.episodes]
        (out / f"episodes-{rank}.json").write_text(json.dumps(episodes))
        rollout = pickle.loads((out / "rollout.pkl").read_bytes())
        groups = {int(g) for g in trainer.envs.group_ids}
        metrics = trainer.update(own_rows(rollout, groups), 1)
        weights = trainer.parallel.full_state(trainer.engine)
        sharded = next((p for p in trainer.engine.parameters() if hasattr(p, "device_mesh")), None)  # FSDP2's DTensors
        accelerator = trainer.parallel.accelerator
        mesh = None if sharded is None else {"device_type": sharded.device_mesh.device_type,
                                             "given": accelerator is not None and accelerator.torch_device_mesh is not None}
        if rank == 0:
            torch.save({"weights": weights, "metrics": metrics, "mesh": mesh}, out / "weights.pt")
        trainer.parallel.barrier()
        trainer.close()
        del trainer
        gc.collect()  # as run_training does (see Trainer.close)
    elif scenario == "train":
        trainer_module.run_training(cfg, echo=lambda *_: None)
    elif scenario in ("die", "fail"):
        real = trainer_module.collect

        def failing(policy, envs, sampling, *, seed, **kwargs):
            if rank == 1 and seed == derive_seed(cfg.seed, 2):
                if scenario == "die":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("injected failure on rank 1")
            return real(policy, envs, sampling, seed=seed, **kwargs)

        trainer_module.collect = failing
        try:
            trainer_module.run_training(cfg, echo=lambda *_: None)
        except RuntimeError:
            (out / "group-after-failure.json").write_text(json.dumps(torch.distributed.is_initialized()))
            raise
    elif scenario == "resume":
        trainer = trainer_module.Trainer(cfg)
        trainer.resume("latest", echo=lambda *_: None)
        trainer.prepare()
        weights = trainer.parallel.full_state(trainer.engine)
        optimizer = trainer.parallel.optimizer_state(trainer.optimizer)
        if rank == 0:
            torch.save({"weights": weights, "optimizer": optimizer}, out / "resumed.pt")
        trainer.parallel.barrier()
        trainer.close()
        del trainer
        gc.collect()
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main()
