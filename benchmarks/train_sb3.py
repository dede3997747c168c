"""Train Stable-Baselines3 PPO on ALFWorld / WebShop through the admissible-action adapter.

The env is ``HashedText(AdmissibleDiscrete(env))`` (``gigpo_gym.wrappers.sb3``):
observations are hashed task + current text + slot actions, actions are slots of
the admissible list.  ``MaskablePPO`` (sb3-contrib) masks the unused slots; plain
``PPO`` (``--algo ppo``) steps an invalid action when it picks one.  After training,
the model is evaluated on the leaderboard spec (greedy) and its result joins
``benchmarks/results/``.

    python benchmarks/train_sb3.py --env alfworld --timesteps 30000
    python benchmarks/train_sb3.py --env webshop --timesteps 20000 --algo ppo
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ENVS = {
    "alfworld": ("gigpo_gym/ALFWorld-v0", "alfworld-valid_seen"),
    "webshop": ("gigpo_gym/WebShop-v0", "webshop-test"),
}


def train(env_name: str, algo: str, timesteps: int, *, dim: int, max_actions: int, n_envs: int, seed: int,
          out_dir: Path, max_steps: int):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    from gigpo_gym.algos.policies.sb3 import SB3Policy
    from gigpo_gym.wrappers.sb3 import make_sb3_env, sb3_algorithms

    env_id, _ = ENVS[env_name]
    algos = sb3_algorithms()
    cls_name = {"maskable": "MaskablePPO", "ppo": "PPO"}[algo]
    if cls_name not in algos:
        raise SystemExit('--algo maskable needs sb3-contrib: pip install "sb3-contrib" (or use --algo ppo)')
    kwargs = {"max_actions": max_actions, "dim": dim, "env_kwargs": {"split": "train", "max_episode_steps": max_steps}}
    vec = make_vec_env(make_sb3_env, n_envs=n_envs, seed=seed, env_kwargs={"env_id": env_id, **kwargs})
    model = algos[cls_name]("MlpPolicy", vec, n_steps=256, batch_size=256, n_epochs=4, learning_rate=3e-4,
                            gamma=0.99, ent_coef=0.01, seed=seed, device="cpu", verbose=0,
                            policy_kwargs={"net_arch": [128, 128]})
    model.set_logger(Logger(folder=None, output_formats=[]))  # else SB3 makes a /tmp/SB3-* folder per run
    started = time.perf_counter()
    model.learn(total_timesteps=timesteps, progress_bar=False)
    seconds = time.perf_counter() - started
    vec.close()
    settings = {"algo": cls_name, "dim": dim, "max_actions": max_actions, "with_actions": True, "env_id": env_id,
                "train_split": "train", "train_max_steps": max_steps, "timesteps": timesteps, "n_envs": n_envs,
                "seed": seed, "train_seconds": round(seconds, 1)}
    path = out_dir / env_name / f"{cls_name.lower()}.zip"
    SB3Policy(model, settings).save(path)
    return path, seconds


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=sorted(ENVS), default="alfworld")
    p.add_argument("--spec", default=None, help="leaderboard spec to evaluate on (default: alfworld-valid_seen / webshop-test)")
    p.add_argument("--algo", choices=("maskable", "ppo"), default="maskable")
    p.add_argument("--timesteps", type=int, default=30_000)
    p.add_argument("--dim", type=int, default=1024, help="hashed feature size")
    p.add_argument("--max-actions", type=int, default=48, help="Discrete(k) slots")
    p.add_argument("--n-envs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-max-steps", type=int, default=None, help="episode cap in training (default: the spec's)")
    p.add_argument("--episodes", type=int, default=None, help="evaluation episodes (default: the spec's)")
    p.add_argument("--out-dir", default="runs/sb3", help="where the model goes")
    p.add_argument("--results-dir", default=None, help="where the leaderboard result goes (default benchmarks/results)")
    p.add_argument("--no-eval", action="store_true")
    args = p.parse_args()

    from gigpo_gym.algos.leaderboard.runner import RESULTS_DIR, load_spec, result_filename, run_spec, write_result
    from gigpo_gym.algos.leaderboard.policies import resolve_policy

    spec = load_spec(args.spec or ENVS[args.env][1])
    path, seconds = train(args.env, args.algo, args.timesteps, dim=args.dim, max_actions=args.max_actions,
                          n_envs=args.n_envs, seed=args.seed, out_dir=Path(args.out_dir),
                          max_steps=args.train_max_steps or spec.max_steps)
    print(f"trained {args.algo} on {args.env} for {args.timesteps} steps in {seconds:.0f} s "
          f"({args.timesteps / seconds:.0f} steps/s) -> {path}")
    if args.no_eval:
        return
    loaded = resolve_policy(f"sb3:{path}", spec.env_id, seed=args.seed)
    result = run_spec(spec, loaded, episodes=args.episodes,
                      notes=f"trained by benchmarks/train_sb3.py --env {args.env} --algo {args.algo} "
                            f"--timesteps {args.timesteps} --seed {args.seed} ({seconds:.0f} s of training)")
    out = write_result(result, Path(args.results_dir or RESULTS_DIR) / result_filename(result))
    m = result["metrics"]
    extra = "".join(f", {k} {100 * m[k]['mean']:.1f}" for k in spec.final_info_metrics)
    print(f"{spec.name}: success {100 * m['success']['mean']:.1f} ± {100 * m['success']['stderr']:.1f}{extra} -> {out}")


if __name__ == "__main__":
    main()
