"""Play the suite's envs through ``skyrl_gym.make``, as SkyRL's generator does.

With no arguments: SearchQA, ALFWorld and WebShop, one episode each, the env's expert
writing the replies an LLM would (a ``<think>`` part, then the action), printing the
conversation start, each step's metadata (anchor, validity) and the return.
"""

from __future__ import annotations

import skyrl_gym

import gigpo_gym.integrations.skyrl  # noqa: F401  (registers every id with skyrl_gym)

#: env id -> (env_config, the instruction the prompt opens with, the reply's format)
EPISODES = {
    "gigpo_gym/SearchQA-v0": ({"split": "test"}, "Answer the question; search with <search>...</search>, "
                              "answer with <answer>...</answer>.", "<think>next step</think>{}"),
    "gigpo_gym/ALFWorld-v0": ({}, "Do the task; write one command inside <action>...</action>.",
                              "<think>next step</think><action>{}</action>"),
    "gigpo_gym/WebShop-v0": ({}, "Buy the product; write search[...] or click[...] inside <action>...</action>.",
                             "<think>next step</think><action>{}</action>"),
}


def main() -> None:
    for env_id, (config, instruction, reply) in EPISODES.items():
        env = skyrl_gym.make(env_id, env_config=config, extras={"seed": 7})
        conversation, info = env.init([{"role": "user", "content": instruction}])
        print(f"{env_id} task {info['task_id']}: {conversation[-1]['content'][:120]!r}...")
        done, total = False, 0.0
        while not done:
            action = env._env.unwrapped.expert_action()  # stands in for the model's reply
            out = env.step(reply.format(action))
            done, total = out["done"], total + out["reward"]
            meta = out["metadata"]
            print(f"  {out['postprocessed_action']!r}: valid {meta['action_valid']}, anchor {meta['anchor']}")
        print(f"  return {total:.2f}, metrics {env.get_metrics()}")


if __name__ == "__main__":
    main()
